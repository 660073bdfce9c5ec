//! Rebalance callbacks: a revoke stops the lanes, waits (bounded) until what their drivers
//! already processed is acknowledged and commits synchronously while the partitions are still
//! owned; an assign starts fresh lanes with new generations on the least-loaded drivers.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use rdkafka::consumer::Consumer;

use super::state::{LaneState, State};
use super::{list, tpl_of, DriverControl, LaneHandle, WeirConsumer};
use crate::kafka::PartitionKey;

impl State {
    pub(super) fn revoke(&mut self, consumer: &WeirConsumer, keys: &[PartitionKey]) {
        self.rebalances += 1;
        tracing::info!(partitions = %list(keys), "partitions revoked");
        // 1. Stop the lanes: nothing more is dispatched; drivers drop what is queued.
        let (ack_tx, ack_rx) = crossbeam_channel::unbounded();
        let mut per_driver: BTreeMap<usize, Vec<(PartitionKey, u64)>> = BTreeMap::new();
        for k in keys {
            if let Some(lane) = self.lane(k) {
                lane.tx = None;
                lane.overflow.clear();
                per_driver
                    .entry(lane.driver)
                    .or_default()
                    .push((k.clone(), lane.generation));
            }
        }
        let mut waiting = 0;
        for (d, lanes) in per_driver {
            let slot = &self.drivers[d];
            if slot.alive
                && slot
                    .tx
                    .send(DriverControl::Revoke {
                        lanes,
                        ack: ack_tx.clone(),
                    })
                    .is_ok()
            {
                waiting += 1;
            }
        }
        let deadline = Instant::now() + self.opts.revoke_timeout;
        let mut last: Vec<(PartitionKey, i64)> = Vec::new();
        while waiting > 0 {
            match ack_rx.recv_deadline(deadline) {
                Ok(lanes) => {
                    waiting -= 1;
                    last.extend(lanes.into_iter().filter_map(|(k, o)| Some((k, o?))));
                }
                Err(_) => {
                    tracing::warn!("revoke: drivers did not stop their lanes in time");
                    break;
                }
            }
        }
        // 2. Wait until what the drivers processed is acknowledged (or the deadline).
        loop {
            self.settle();
            let pending = last.iter().any(|(k, o)| {
                self.lanes
                    .get(&*k.topic)
                    .and_then(|ps| ps.get(&k.partition))
                    .and_then(|l| l.watermark.as_ref())
                    .is_some_and(|w| !w.settled_through(*o))
            });
            if !pending {
                break;
            }
            match self.completions.recv_deadline(deadline) {
                Ok(c) => self.apply(c),
                Err(_) => {
                    tracing::warn!("revoke: in-flight messages not acknowledged in time; committing what is done");
                    break;
                }
            }
        }
        self.settle();
        // 3. Commit while the partitions are still ours, then forget them.
        self.commit(consumer, None, Some(keys));
        for k in keys {
            let removed = self
                .lanes
                .get_mut(&*k.topic)
                .and_then(|ps| ps.remove(&k.partition));
            if let Some(lane) = removed {
                self.in_flight -= lane.bytes.iter().map(|(_, b)| b).sum::<usize>();
                self.drivers[lane.driver].lanes -= 1;
            }
        }
        self.lanes.retain(|_, ps| !ps.is_empty());
        self.metrics.in_flight_bytes.set(self.in_flight as i64);
    }

    pub(super) fn assign(&mut self, consumer: &WeirConsumer, keys: &[PartitionKey]) {
        self.rebalances += 1;
        self.assigned_once = true;
        tracing::info!(partitions = %list(keys), "partitions assigned");
        let mut pause = Vec::new();
        for k in keys {
            self.next_generation += 1;
            let generation = self.next_generation;
            let Some(driver) = (0..self.drivers.len())
                .filter(|&d| self.drivers[d].alive)
                .min_by_key(|&d| self.drivers[d].lanes)
            else {
                self.error
                    .get_or_insert_with(|| "no driver is running".into());
                return;
            };
            let (tx, rx) = crossbeam_channel::bounded(self.opts.lane_capacity);
            let handle = LaneHandle {
                key: k.clone(),
                generation,
                rx,
            };
            if self.drivers[driver]
                .tx
                .send(DriverControl::Add(handle))
                .is_err()
            {
                self.drivers[driver].alive = false;
                self.error
                    .get_or_insert_with(|| format!("driver {driver} is gone"));
                continue;
            }
            self.drivers[driver].lanes += 1;
            let paused = self.budget_paused();
            if paused {
                pause.push(k.clone());
            }
            let old = self.lanes.entry(k.topic.clone()).or_default().insert(
                k.partition,
                LaneState {
                    generation,
                    driver,
                    tx: Some(tx),
                    watermark: None,
                    bytes: VecDeque::new(),
                    overflow: VecDeque::new(),
                    paused,
                    slow_until: None,
                    end: None,
                    start: None,
                },
            );
            if let Some(old) = old {
                tracing::warn!(key = %k, "assigned again without a revoke; the old lane is dropped");
                self.in_flight -= old.bytes.iter().map(|(_, b)| b).sum::<usize>();
                self.drivers[old.driver].lanes -= 1;
            }
        }
        // A partition can come back still paused from an earlier assignment; start it afresh.
        let fresh: Vec<&PartitionKey> = keys.iter().filter(|k| !pause.contains(k)).collect();
        if !fresh.is_empty() {
            let _ = consumer.resume(&tpl_of(fresh));
        }
        if !pause.is_empty() {
            let _ = consumer.pause(&tpl_of(&pause));
        }
    }
}
