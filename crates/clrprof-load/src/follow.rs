//! A run of a collector's store read as it grows: each [`RunFollower::refresh`] decodes the bytes
//! stored since the last one into an incremental `ProfileBuilder` (the same decoding
//! [`crate::store::run_source`] + [`crate::Loader`] does in one go), so a profile of what arrived
//! can be asked at any time.

use std::sync::Arc;

use clrprof_collect::{RunId, RunState, RunStore, RunTail};
use clrprof_model::ProfileBuilder;
use clrprof_trace::{Record, StreamDecoder};

/// Where a followed run stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowStatus {
    /// Changes whenever a profile of the run would: new bytes, or a new state.
    pub generation: u64,
    pub bytes: u64,
    pub records: u64,
    pub state: RunState,
}

/// A run being read from its store.
pub struct RunFollower {
    id: RunId,
    tail: RunTail,
    decoder: StreamDecoder,
    builder: ProfileBuilder,
    batch: Vec<Record>,
    generation: u64,
    bytes: u64,
    state: RunState,
    /// The run ended and the decoder was finished: nothing more will come.
    ended: bool,
    /// The stored bytes stopped decoding here (kept: the profile is what was read before).
    failed: Option<String>,
}

impl RunFollower {
    /// Follows run `id` of `store` from its first byte (nothing is read before [`Self::refresh`]).
    pub fn new(store: Arc<dyn RunStore>, id: RunId) -> RunFollower {
        RunFollower {
            id,
            tail: RunTail::new(store, id),
            decoder: StreamDecoder::new(),
            builder: ProfileBuilder::new(),
            batch: Vec::new(),
            generation: 0,
            bytes: 0,
            state: RunState::Running,
            ended: false,
            failed: None,
        }
    }

    /// The records read so far.
    pub fn builder(&self) -> &ProfileBuilder {
        &self.builder
    }

    /// Reads what the store holds beyond what was read. Undecodable bytes are not an error: the
    /// profile stays what was read before them, with a warning in its messages. An error means the
    /// store could not be read, or no longer holds the run.
    pub fn refresh(&mut self) -> Result<FollowStatus, String> {
        if !self.ended {
            let (bytes, info) = self.tail.poll().map_err(|e| format!("run {}: {e}", self.id))?;
            let info = info.ok_or_else(|| format!("run {} is no longer in the store", self.id))?;
            let mut changed = info.state != self.state;
            if !bytes.is_empty() && self.failed.is_none() {
                self.bytes += bytes.len() as u64;
                changed = true;
                if let Err(e) = self.decoder.push(&bytes, &mut self.batch) {
                    let msg = format!(
                        "run {}: stored trace unreadable after {} records: {e}",
                        self.id,
                        self.builder.records()
                    );
                    self.builder.warn(msg.clone());
                    self.failed = Some(msg);
                }
                for r in self.batch.drain(..) {
                    self.builder.add(&r);
                }
            }
            self.state = info.state;
            if info.state != RunState::Running {
                // Everything stored before the state said "ended" was read above.
                self.ended = true;
                if self.failed.is_none() {
                    match self.decoder.finish() {
                        Ok(Some(t)) => self.builder.warn(t.to_string()),
                        Ok(None) => {}
                        Err(e) => self.builder.warn(format!("run {}: the stored trace ends badly: {e}", self.id)),
                    }
                }
            }
            if changed {
                self.generation += 1;
            }
        }
        Ok(FollowStatus {
            generation: self.generation,
            bytes: self.bytes,
            records: self.builder.records(),
            state: self.state,
        })
    }
}
