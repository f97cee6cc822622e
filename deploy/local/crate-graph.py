#!/usr/bin/env python3
"""Prints the workspace's crate graph from `cargo metadata`: for each workspace crate, the
workspace crates it depends on (normal, build, and dev edges marked), and fails if any path of
edges, dev-dependencies included, leads from a crate back to itself. README.md's "Layout"
section is this output between its `crate-graph` markers; `--check` fails when they differ."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- crate-graph begin -->", "<!-- crate-graph end -->"


def graph():
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    names = {p["name"] for p in meta["packages"]}
    edges = {}
    for p in meta["packages"]:
        out = {}
        for d in p["dependencies"]:
            if d["name"] in names and d["name"] != p["name"]:
                kind = d["kind"] or "normal"
                # A crate named as both a normal and a dev dependency counts as normal.
                if out.get(d["name"]) != "normal":
                    out[d["name"]] = kind
        edges[p["name"]] = out
    return edges


def cycle(edges):
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(edges.get(n, {})):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = "done"
        return None

    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def render(edges):
    # Crates in dependency order: each after every crate it depends on (normal and build edges).
    order, seen = [], set()

    def place(n):
        if n in seen:
            return
        seen.add(n)
        for m in sorted(k for k, kind in edges[n].items() if kind != "dev"):
            place(m)
        order.append(n)

    for n in sorted(edges):
        place(n)
    lines = ["```text"]
    for n in order:
        deps = [m for m, kind in sorted(edges[n].items()) if kind != "dev"]
        dev = [m for m, kind in sorted(edges[n].items()) if kind == "dev"]
        line = f"{n} -> {', '.join(deps) if deps else '(none)'}"
        if dev:
            line += f"   [dev: {', '.join(dev)}]"
        lines.append(line)
    lines.append("```")
    return "\n".join(lines)


def main():
    edges = graph()
    loop = cycle(edges)
    if loop:
        sys.exit("dependency cycle: " + " -> ".join(loop))
    text = render(edges)
    if "--check" in sys.argv:
        readme = (ROOT / "README.md").read_text()
        inside = readme.split(BEGIN, 1)[1].split(END, 1)[0].strip() if BEGIN in readme else None
        if inside != text:
            sys.exit("README.md's crate graph differs from cargo metadata: run python3 deploy/local/crate-graph.py and paste it between the crate-graph markers")
        print("crate graph: no cycle, README.md up to date")
        return
    print(text)


if __name__ == "__main__":
    main()
