//! The systemd units in deploy/systemd (RFC 0016) pass `systemd-analyze verify`: their syntax,
//! every setting's value, and that each command they run exists and is executable. The units
//! name the installed paths (/usr/local/bin, /usr/bin/etcd); here those are this build's
//! binaries and the etcd the harness uses. A template is verified as an instance.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

#[test]
fn the_systemd_units_pass_systemd_analyze_verify() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_shard-router")).parent().unwrap().to_owned();
    let coordinator = shardplane_testkit::workspace_binary("shardplane-coordinator");
    assert_eq!(coordinator.parent(), Some(bin_dir.as_path()), "the coordinator is built beside shard-router");
    let etcd = workspace().join(".tools/etcd/usr/bin/etcd");
    assert!(etcd.exists(), "etcd 3.5 missing: run deploy/local/install-deps.sh");
    let dir = std::env::temp_dir().join(format!("shardplane-units-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut units = Vec::new();
    for entry in std::fs::read_dir(workspace().join("deploy/systemd")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "service") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap().replace("/usr/local/bin/", &format!("{}/", bin_dir.display())).replace("/usr/bin/etcd", etcd.to_str().unwrap());
        let name = path.file_name().unwrap().to_str().unwrap().replace("@.service", "@s0.service");
        std::fs::write(dir.join(&name), text).unwrap();
        units.push(name);
    }
    units.sort();
    assert_eq!(units, ["etcd-member.service", "shardplane-coordinator.service", "shardplane-router.service", "shardplane-shard@s0.service"]);
    let out = std::process::Command::new("systemd-analyze").arg("verify").args(units.iter().map(|u| dir.join(u))).output().expect("systemd-analyze (Debian's systemd package)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    // A value it cannot parse is reported on standard error with exit code 0.
    assert!(out.status.success() && stderr.trim().is_empty(), "systemd-analyze verify: {stderr}");
}
