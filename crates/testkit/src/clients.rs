//! Runners for the client programs the suites drive a server with: a Go program built against
//! Debian's client-go (GOPATH mode, no module download), and a Python script using the PyPI
//! `kubernetes` client. Both are installed by deploy/local/install-deps.sh; the programs
//! themselves live beside the tests that read their output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The Go toolchain Debian's client-go packages are built for.
pub const GO: &str = "/usr/lib/go-1.24/bin/go";

/// Builds the Go program `source` (one file) against Debian's client-go into `out_dir`, and
/// returns the binary's path. Panics if Go is missing or the build fails.
pub fn build_go_program(source: &Path, out_dir: &Path) -> PathBuf {
    assert!(Path::new(GO).exists(), "Go 1.24 missing: run deploy/local/install-deps.sh");
    std::fs::create_dir_all(out_dir).unwrap();
    // One Go build at a time per target directory: the programs share one build cache, so the
    // second build takes client-go from it instead of compiling it again beside the first.
    let shared = out_dir.parent().unwrap_or(out_dir);
    let lock = std::fs::File::create(shared.join("go-build.lock")).expect("the Go build lock file");
    lock.lock().expect("lock the Go build");
    let name = source.file_stem().and_then(|s| s.to_str()).unwrap_or("program");
    let bin = out_dir.join(if name == "main" { source.parent().and_then(Path::file_name).and_then(|s| s.to_str()).unwrap_or("program") } else { name });
    let status = Command::new(GO)
        .args(["build", "-o"])
        .arg(&bin)
        .arg(source)
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        // One build cache for every program of a test target directory: client-go is built once.
        .env("GOCACHE", shared.join("go-build-cache"))
        .env("GOFLAGS", "")
        .status()
        .expect("run go build");
    assert!(status.success(), "building {} failed", source.display());
    bin
}

/// Runs `script` with python3 and `args`, with the loopback address kept off any proxy.
pub fn run_python(script: &Path, args: &[&str]) -> Output {
    Command::new("python3").arg(script).args(args).env("NO_PROXY", "127.0.0.1").output().expect("run python3")
}
