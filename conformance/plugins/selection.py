"""Deselects, by name, the tests listed in conformance/deselected.txt for the running suite, and
records each with its reason, so nothing is skipped silently. A line is
`<suite> <test> -- <reason>`; <test> is a test function name, optionally with its parameters
(`test_x[a]`), or a shell-style pattern (`test_*port_forward*`)."""

import fnmatch
import json
import os

import pytest

SUITE = os.environ.get("CONFORMANCE_SUITE", "")
LIST = os.environ.get("CONFORMANCE_DESELECTED", "")
RECORD = os.environ.get("CONFORMANCE_DESELECTED_OUT", "")


def load():
    rules = []
    if not LIST:
        return rules
    for line in open(LIST):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, _, reason = line.partition(" -- ")
        suite, _, test = head.strip().partition(" ")
        if suite == SUITE:
            rules.append((test.strip(), reason.strip()))
    return rules


def matches(rule, item):
    name = item.name
    return fnmatch.fnmatchcase(name, rule) or fnmatch.fnmatchcase(name.split("[")[0], rule)


def pytest_collection_modifyitems(config, items):
    rules = load()
    keep, dropped = [], []
    for item in items:
        hit = next((r for r in rules if matches(r[0], item)), None)
        if hit:
            dropped.append({"test": f"{item.path.name}::{item.name}", "reason": hit[1]})
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    if RECORD:
        with open(RECORD, "w") as f:
            json.dump(dropped, f)
