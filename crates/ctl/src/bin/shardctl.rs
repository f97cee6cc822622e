//! `shardctl`: the operator's view and controls of shardplane's shards and range moves
//! (RFC 0006). It reads and edits the range map in etcd; the coordinator carries requests out.

use clap::{Parser, Subcommand, ValueEnum};
use shardplane_coordinator::rebalance;
use shardplane_ctl::{edit_map, parse_hash, parse_range, plan, planned_moves, read_status, render_space_alarms, render_status, CtlError};
use shardplane_storage::Storage;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(name = "shardctl", about = "Shows and steers shardplane's shards and range moves")]
struct Args {
    /// etcd endpoints of the cluster (comma-separated), as given to shard-router.
    #[arg(long, global = true, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    etcd_endpoints: Vec<String>,
    #[command(flatten)]
    store_tls: shardplane_storage::StoreTlsFlags,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Shards, their health, ranges, objects and cache bytes; the epoch; the moves in flight.
    Status,
    /// Move a range (or part of one shard's range) to another shard.
    Move {
        /// 0xSTART-0xEND.
        range: String,
        /// The shard that takes it.
        #[arg(long)]
        to: String,
        /// Wait for the move to finish, showing its progress.
        #[arg(long)]
        wait: bool,
        /// Seconds to wait with --wait.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Cut one shard's range in two at a hash (no data moves; the epoch stays).
    Split {
        range: String,
        /// 0x and 16 hex digits, strictly inside the range.
        #[arg(long)]
        at: String,
    },
    /// Join two adjacent ranges of one shard (no data moves; the epoch stays).
    Merge { first: String, second: String },
    /// Let a live shard take ranges from the most loaded shards.
    Add { id: String },
    /// Move every range away from a shard, one at a time; it takes no new ones.
    Drain { id: String },
    /// Recover from etcd's NOSPACE alarm: compact to the current revision, defragment every
    /// endpoint given, disarm the alarm. Safe to run without an alarm.
    RecoverSpace,
    /// Turn on etcd's access control for certificate-named processes (RFC 0012): roles that let
    /// shards (`CN=shardplane-shard`) write objects and their membership but not the range map,
    /// which routers (`CN=shardplane-router`) and coordinators (`CN=shardplane-coordinator`)
    /// write. Run once, as `root` (`--etcd-certfile` of a certificate with `CN=root`).
    StoreRoles,
    /// Which axis the cluster is loaded along (RFC 0015): writes by category and resource over
    /// a window, cache bytes, objects and watchers by resource, the axis with the numbers that
    /// say so, and the seam that helps. Read from the shards' member keys.
    Axes {
        /// Seconds to measure writes over (by the shards' own clocks).
        #[arg(long, default_value_t = 10)]
        window: u64,
    },
    /// Start rebalancing now; with --dry-run, only show the moves it would start.
    Rebalance {
        #[arg(long)]
        dry_run: bool,
    },
    /// The store itself (RFC 0016): its members' health and sizes, defragmentation, snapshots.
    Store {
        #[command(subcommand)]
        action: StoreCommand,
    },
}

#[derive(Subcommand, Debug)]
enum StoreCommand {
    /// Every member given in --etcd-endpoints: which leads, database size and the part in use,
    /// revision and raft position, errors; the store's alarms, revision and compacted revision.
    Status,
    /// Defragment every member given, one at a time (each answers again before the next
    /// starts); refused unless every member answers.
    Defrag,
    /// Save a snapshot of the store to a file (to restore from with `etcdutl snapshot restore`).
    Snapshot {
        /// The file to write (written beside it, then renamed: never half a snapshot).
        path: std::path::PathBuf,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shardctl: error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: &Args) -> Result<String, CtlError> {
    args.store_tls.install().map_err(CtlError::Usage)?;
    let storage = Storage::connect(&args.etcd_endpoints).await?;
    let json = args.output == Output::Json;
    let report = |value: serde_json::Value, text: String| if json { format!("{}\n", serde_json::to_string_pretty(&value).expect("json")) } else { text };
    match &args.command {
        Command::Status => match read_status(&storage).await {
            Ok(s) => Ok(report(serde_json::to_value(&s).expect("json"), render_status(&s))),
            // Nothing routed yet; the store's own state is still worth showing.
            Err(CtlError::NoMap) => {
                let alarms = storage.space_alarms().await?;
                let mut text = String::new();
                if !alarms.is_empty() {
                    text.push_str(&render_space_alarms(&alarms));
                }
                text.push_str("no range map is stored in this etcd yet: start a router (shard-router)\n");
                Ok(report(serde_json::json!({"rangeMap": null, "space_alarms": alarms}), text))
            }
            Err(e) => Err(e),
        },
        Command::Move { range, to, wait, timeout } => {
            let range = parse_range(range)?;
            let next = edit_map(&storage, |m, members| rebalance::request_move(m, members, range, to, &plan())).await?;
            let text = format!("move of {range} to {to} requested (epoch {})\n", next.epoch);
            if *wait {
                wait_for_move(&storage, range, Duration::from_secs(*timeout), json).await?;
            }
            Ok(report(serde_json::json!({"range": range.to_string(), "to": to, "requested": true}), text))
        }
        Command::Split { range, at } => {
            let (range, at) = (parse_range(range)?, parse_hash(at)?);
            let next = edit_map(&storage, |m, _| rebalance::request_split(m, range, at)).await?;
            Ok(report(serde_json::json!({"split": range.to_string(), "at": format!("0x{at:016x}"), "epoch": next.epoch}), format!("split {range} at 0x{at:016x} (epoch {})\n", next.epoch)))
        }
        Command::Merge { first, second } => {
            let (a, b) = (parse_range(first)?, parse_range(second)?);
            let next = edit_map(&storage, |m, _| rebalance::request_merge(m, a, b)).await?;
            Ok(report(serde_json::json!({"merged": [a.to_string(), b.to_string()], "epoch": next.epoch}), format!("merged {a} and {b} (epoch {})\n", next.epoch)))
        }
        Command::Add { id } => {
            edit_map(&storage, |m, members| rebalance::request_add(m, members, id)).await?;
            Ok(report(serde_json::json!({"added": id}), format!("shard {id} takes ranges as the coordinator rebalances\n")))
        }
        Command::Drain { id } => {
            edit_map(&storage, |m, _| rebalance::request_drain(m, id)).await?;
            Ok(report(serde_json::json!({"draining": id}), format!("shard {id} is draining: its ranges move away one at a time\n")))
        }
        Command::RecoverSpace => {
            let r = storage.recover_space(&args.etcd_endpoints).await?;
            Ok(report(
                serde_json::json!({"compactedTo": r.compacted_to, "defragmented": r.defragmented, "disarmed": r.disarmed}),
                format!("compacted to revision {}, defragmented {} member(s), disarmed {} alarm(s)\n", r.compacted_to, r.defragmented, r.disarmed),
            ))
        }
        Command::StoreRoles => {
            let done = storage.set_up_roles().await?;
            Ok(report(serde_json::json!({"done": done}), done.iter().map(|d| format!("{d}\n")).collect()))
        }
        Command::Axes { window } => {
            let d = axes(&storage, Duration::from_secs(*window)).await?;
            Ok(report(serde_json::to_value(&d).expect("json"), shardplane_ctl::axes::render(&d)))
        }
        Command::Rebalance { dry_run } => {
            if *dry_run {
                let map = storage.load_range_map().await?.ok_or(CtlError::NoMap)?.map;
                let moves = planned_moves(&map, &storage.members().await?);
                let text = if moves.is_empty() { "balanced: no move would start\n".to_owned() } else { moves.iter().map(|m| format!("would move {} from {} to {}\n", m.range, m.from, m.to)).collect() };
                return Ok(report(serde_json::to_value(&moves).expect("json"), text));
            }
            let next = edit_map(&storage, |m, members| Ok(rebalance::request_rebalance(m, members, &plan()))).await?;
            Ok(report(serde_json::json!({"balancing": next.balancing, "moves": next.moves.len()}), format!("rebalancing: {} move(s) in flight\n", next.moves.len())))
        }
        Command::Store { action: StoreCommand::Status } => {
            let s = storage.store_status(&args.etcd_endpoints).await?;
            Ok(report(serde_json::to_value(&s).expect("json"), shardplane_ctl::store::render_status(&s)))
        }
        Command::Store { action: StoreCommand::Defrag } => {
            let done = Storage::defragment_members(&args.etcd_endpoints).await?;
            Ok(report(serde_json::to_value(&done).expect("json"), shardplane_ctl::store::render_defrag(&done)))
        }
        Command::Store { action: StoreCommand::Snapshot { path } } => {
            let (bytes, revision) = storage.save_snapshot(path).await?;
            Ok(report(serde_json::json!({"path": path, "bytes": bytes, "revision": revision}), format!("saved a snapshot at revision {revision} to {} ({bytes} bytes)\n", path.display())))
        }
    }
}

/// Reads the shards' keys, then again once each has published a reading `window` later (by its
/// own uptime), and diagnoses the difference.
async fn axes(storage: &Storage, window: Duration) -> Result<shardplane_ctl::axes::Diagnosis, CtlError> {
    let before = storage.members().await?.shards;
    if before.is_empty() {
        return Err(CtlError::Usage("no live shard is registered in this etcd".into()));
    }
    // A shard refreshes its key every third of its lease's TTL: allow a few refreshes past the
    // window.
    let deadline = Instant::now() + window + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = storage.members().await?.shards;
        let done = before.iter().all(|b| after.iter().find(|a| a.id == b.id).is_none_or(|a| a.load.uptime_ms < b.load.uptime_ms || a.load.uptime_ms >= b.load.uptime_ms + window.as_millis() as u64));
        if done {
            return Ok(shardplane_ctl::axes::diagnose(&before, &after));
        }
        if Instant::now() >= deadline {
            return Err(CtlError::Timeout(format!("the shards did not publish a reading {window:?} after the first within a minute")));
        }
    }
}

/// Shows a move's progress (loading → draining → done) until it is done.
async fn wait_for_move(storage: &Storage, range: shardplane_keyspace::HashRange, timeout: Duration, quiet: bool) -> Result<(), CtlError> {
    let bar = if quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(3) };
    bar.set_style(indicatif::ProgressStyle::with_template("{msg} [{bar:20}] {pos}/{len} ({elapsed})").expect("template").progress_chars("=> "));
    let deadline = Instant::now() + timeout;
    loop {
        let map = storage.load_range_map().await?.ok_or(CtlError::NoMap)?.map;
        match map.moves.iter().find(|m| m.range == range) {
            None => {
                bar.finish_with_message(format!("{range}: done"));
                return Ok(());
            }
            Some(m) => {
                let (pos, what) = match m.phase {
                    shardplane_storage::range_map::MovePhase::Loading => (1, format!("{range}: {} loading", m.to)),
                    shardplane_storage::range_map::MovePhase::Draining => (2, format!("{range}: on {}, {} draining", m.to, m.from)),
                };
                bar.set_position(pos);
                bar.set_message(what);
            }
        }
        if Instant::now() >= deadline {
            bar.abandon();
            return Err(CtlError::Timeout(format!("the move of {range} did not finish within {timeout:?}")));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
