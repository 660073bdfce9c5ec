//! `weir check`.

use std::path::Path;
use std::process::ExitCode;

pub fn check(path: &Path, connect: bool) -> ExitCode {
    let cfg = match crate::config::load(path) {
        Ok(c) => c,
        Err(e) => return super::bad_input(e),
    };
    if connect {
        if !crate::kafka::preflight::applies(&cfg) {
            println!("no Kafka source, sink or reject path: nothing to connect to");
        }
        let mode = crate::kafka::preflight::Mode::Check;
        let printed =
            crate::kafka::preflight::run(&cfg, cfg.runtime.connect_timeout, mode, &mut |l| {
                println!("{}", crate::redact::redact(&l.to_string()));
            });
        if let Err(f) = printed {
            println!(
                "FAIL  {:<12} {}",
                f.client,
                crate::redact::redact(&f.message)
            );
            return super::client_failure("", &f);
        }
    }
    let prepared = match crate::runtime::prepare(&cfg) {
        Ok(p) => p,
        Err(e) => return super::bad_input(e),
    };
    println!(
        "pipeline `{}`: {} stage(s), all instantiated and initialised",
        cfg.name,
        prepared.slots.len()
    );
    for (i, slot) in prepared.slots.iter().enumerate() {
        let (_, plugin) = slot.current();
        println!(
            "  {}. {:<16} {}  contract={:?} plugin={} cache={:?} load={}ms memory={} timeout={} max_output={}",
            i + 1,
            slot.spec.name,
            plugin.path.display(),
            plugin.contract,
            plugin.short_hash(),
            plugin.cache,
            plugin.load_time.as_millis(),
            crate::config::ByteSize(slot.spec.memory as u64),
            humantime::format_duration(slot.spec.timeout),
            crate::config::ByteSize(slot.spec.max_output as u64),
        );
    }
    ExitCode::SUCCESS
}
