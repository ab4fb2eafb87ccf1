//! Per-stage device timing of a decode step (for the L-row benchmarks): timing-enabled events
//! recorded on the main stream between the stages and on the side stream around the current-chunk
//! attention, read as durations ([`StageTimes`]) or as a timeline from the step's start
//! ([`StageTimeline`]). Only a context built with `profile = true` creates and records them.

use super::error::MlaError;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};
use std::sync::Arc;

/// Where an event is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mark {
    /// Main stream, before the fork.
    Start,
    /// Main stream, after the Q all-gather.
    Gathered,
    /// Main stream, after the split-KV history pass.
    History,
    /// Main stream, after the reduce into `hist_send`.
    Reduced,
    /// Main stream, after the exchange.
    Exchanged,
    /// Main stream, after the join and the combine.
    Combined,
    /// Main stream, after the V-up (end of the step).
    VupDone,
    /// Side stream, before the current-chunk attention.
    CurrentStart,
    /// Side stream, after it.
    CurrentEnd,
}

const MARKS: usize = 9;

/// Device microseconds of each stage of the last profiled call.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimes {
    /// Fork to the end of the V-up (the whole step on the main stream).
    pub total_us: f64,
    /// Duration of the Q all-gather.
    pub gather_us: f64,
    /// Duration of the history pass (`mla_history`).
    pub history_us: f64,
    /// Duration of the split reduce (`mla_history_reduce`).
    pub reduce_us: f64,
    /// Duration of the history exchange.
    pub exchange_us: f64,
    /// On the side stream (overlapped with gather, history, reduce and exchange).
    pub current_us: f64,
    /// Includes the main stream's wait on current_attn_done.
    pub combine_us: f64,
    /// Duration of the V-up.
    pub vup_us: f64,
}

/// When each stage of the last profiled call ended, in device microseconds after its
/// `Mark::Start` event on the main stream (one clock for both streams: CUDA events of one
/// context share a timebase). The side stream's current part overlaps the exchange when it
/// starts before the exchange ends; it is hidden when it also ends before.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimeline {
    /// Side stream: the current-chunk attention started.
    pub current_start_us: f64,
    /// Side stream: the current-chunk attention ended.
    pub current_end_us: f64,
    /// The Q all-gather ended.
    pub gathered_us: f64,
    /// The history pass ended.
    pub history_us: f64,
    /// The split reduce ended.
    pub reduced_us: f64,
    /// The exchange ended.
    pub exchanged_us: f64,
    /// The combine ended.
    pub combined_us: f64,
    /// The V-up ended (end of the step).
    pub vup_done_us: f64,
}

impl StageTimeline {
    /// The current part started on the side stream before the exchange ended on the main one.
    pub fn current_starts_before_exchange_ends(&self) -> bool {
        self.current_start_us < self.exchanged_us
    }

    /// The current part ran entirely inside the main stream's history + exchange window: it
    /// costs the step nothing.
    pub fn current_hidden(&self) -> bool {
        self.current_starts_before_exchange_ends() && self.current_end_us <= self.exchanged_us
    }

    /// One line: `main: gather@.. history@.. reduce@.. exchange@.. combine@.. vup@.. |
    /// side: current [a, b] | overlap=..` (µs after the start).
    pub fn render(&self) -> String {
        format!(
            "main: gather@{:.1} history@{:.1} reduce@{:.1} exchange@{:.1} combine@{:.1} \
             vup@{:.1} | side: current [{:.1}, {:.1}] | overlap={} hidden={}",
            self.gathered_us,
            self.history_us,
            self.reduced_us,
            self.exchanged_us,
            self.combined_us,
            self.vup_done_us,
            self.current_start_us,
            self.current_end_us,
            self.current_starts_before_exchange_ends(),
            self.current_hidden()
        )
    }
}

/// The events of one context.
pub(crate) struct StageEvents {
    events: Vec<CudaEvent>,
}

impl StageEvents {
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self, MlaError> {
        let events = (0..MARKS)
            .map(|_| {
                stream
                    .context()
                    .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(MlaError::driver("creating a stage timing event"))
            })
            .collect::<Result<_, _>>()?;
        Ok(StageEvents { events })
    }

    /// The event of `mark` (one per mark, created in [`Self::new`]).
    fn event(&self, mark: Mark) -> Result<&CudaEvent, MlaError> {
        self.events.get(mark as usize).ok_or(MlaError::StageOrder {
            stage: "stage timing",
            why: "a mark has no event (internal error)",
        })
    }

    pub fn record(&self, mark: Mark, stream: &CudaStream) -> Result<(), MlaError> {
        self.event(mark)?
            .record(stream)
            .map_err(MlaError::driver("recording a stage timing event"))
    }

    fn us(&self, from: Mark, to: Mark) -> Result<f64, MlaError> {
        let ms = self
            .event(from)?
            .elapsed_ms(self.event(to)?)
            .map_err(MlaError::driver("reading a stage timing event"))?;
        Ok(f64::from(ms) * 1e3)
    }

    /// Waits for the last event of both streams.
    fn wait(&self) -> Result<(), MlaError> {
        for last in [Mark::VupDone, Mark::CurrentEnd] {
            self.event(last)?
                .synchronize()
                .map_err(MlaError::driver("waiting for the stage timing events"))?;
        }
        Ok(())
    }

    /// Waits for the step and reads every mark relative to its start.
    pub fn timeline(&self) -> Result<StageTimeline, MlaError> {
        self.wait()?;
        let at = |m: Mark| self.us(Mark::Start, m);
        Ok(StageTimeline {
            current_start_us: at(Mark::CurrentStart)?,
            current_end_us: at(Mark::CurrentEnd)?,
            gathered_us: at(Mark::Gathered)?,
            history_us: at(Mark::History)?,
            reduced_us: at(Mark::Reduced)?,
            exchanged_us: at(Mark::Exchanged)?,
            combined_us: at(Mark::Combined)?,
            vup_done_us: at(Mark::VupDone)?,
        })
    }

    /// Waits for the step's last event and reads every interval.
    pub fn times(&self) -> Result<StageTimes, MlaError> {
        self.wait()?;
        use Mark::*;
        Ok(StageTimes {
            total_us: self.us(Start, VupDone)?,
            gather_us: self.us(Start, Gathered)?,
            history_us: self.us(Gathered, History)?,
            reduce_us: self.us(History, Reduced)?,
            exchange_us: self.us(Reduced, Exchanged)?,
            current_us: self.us(CurrentStart, CurrentEnd)?,
            combine_us: self.us(Exchanged, Combined)?,
            vup_us: self.us(Combined, VupDone)?,
        })
    }
}
