//! kubectl (the real binaries from the base image: /usr/lib/google-cloud-sdk/bin/kubectl.1.NN)
//! pointed at a test server, with its own HOME and cache.

use std::process::{Command, Stdio};

/// The kubectl of `version` (`1.33`); panics if the base image lacks it.
pub fn kubectl_path(version: &str) -> String {
    let p = format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}");
    assert!(std::path::Path::new(&p).exists(), "{p} missing: the base image ships kubectl 1.27-1.33");
    p
}

pub struct Kubectl {
    pub bin: String,
    pub server: String,
    pub home: tempdir::Dir,
}

pub mod tempdir {
    /// A temporary directory `<system temp dir>/<prefix>-<uuid>`, made when created and removed
    /// when dropped, however a test ends (a failed assertion included). Declared before the
    /// processes that use it, it outlives them.
    pub struct Dir(pub std::path::PathBuf);
    impl Default for Dir {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Dir {
        /// A kubectl home.
        pub fn new() -> Self {
            Self::named("shardplane-kubectl")
        }

        /// `<prefix>-<uuid>`.
        pub fn named(prefix: &str) -> Self {
            let p = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }

        /// A path inside it.
        pub fn join(&self, path: &str) -> std::path::PathBuf {
            self.0.join(path)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Kubectl {
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("HOME", &self.home.0).env_remove("KUBECONFIG").arg(format!("--server={}", self.server)).arg(format!("--cache-dir={}/cache", self.home.0.display())).args(args);
        c
    }

    /// Runs kubectl with `stdin` (if any) and returns its exit status and output.
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        let mut c = self.command(args);
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn kubectl");
        if let Some(input) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        } else {
            drop(child.stdin.take());
        }
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl; panics with its output unless it exits 0. Returns stdout.
    pub fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "kubectl {args:?} failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
        stdout
    }
}

