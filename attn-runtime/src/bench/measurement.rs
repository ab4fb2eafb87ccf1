//! A criterion [`Measurement`] that times with CUDA events on a stream, so benches
//! measure device time (not host clocks, launch queues or synchronization jitter).
//! Throughput: `Throughput::Bytes` reports GB/s; `Throughput::Elements` is read as FLOPs
//! and reports TFLOP/s.

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};
use std::sync::Arc;

use crate::launch::CudaDevice;

/// Criterion timing with CUDA events on device 0's default stream: the configuration the
/// kernel benches share.
pub fn criterion_on_device0() -> Criterion<CudaEventTime> {
    let dev = CudaDevice::new(0).expect("benches need a CUDA device");
    Criterion::default().with_measurement(CudaEventTime::new(dev.default_stream()))
}

/// Times the work criterion issues between `start` and `end` on `stream`.
pub struct CudaEventTime {
    stream: Arc<CudaStream>,
}

impl CudaEventTime {
    pub fn new(stream: Arc<CudaStream>) -> Self {
        CudaEventTime { stream }
    }

    fn record(&self) -> CudaEvent {
        // Criterion's trait has no error channel: a failing driver during a bench is fatal.
        let ev = self
            .stream
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .unwrap_or_else(|e| panic!("CUDA event creation failed during a bench: {e}"));
        ev.record(&self.stream)
            .unwrap_or_else(|e| panic!("CUDA event record failed during a bench: {e}"));
        ev
    }
}

impl Measurement for CudaEventTime {
    type Intermediate = CudaEvent;
    /// Nanoseconds of device time.
    type Value = f64;

    fn start(&self) -> CudaEvent {
        self.record()
    }

    fn end(&self, start: CudaEvent) -> f64 {
        let stop = self.record();
        let ms = stop
            .synchronize()
            .and_then(|_| start.elapsed_ms(&stop))
            .unwrap_or_else(|e| panic!("CUDA event timing failed during a bench: {e}"));
        ms as f64 * 1e6
    }

    fn add(&self, a: &f64, b: &f64) -> f64 {
        a + b
    }
    fn zero(&self) -> f64 {
        0.0
    }
    fn to_f64(&self, v: &f64) -> f64 {
        *v
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &DeviceTimeFormatter
    }
}

/// Formats nanoseconds of device time and GB/s / TFLOP/s throughputs.
pub struct DeviceTimeFormatter;

impl ValueFormatter for DeviceTimeFormatter {
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical_ns < 1e3 {
            (1.0, "ns")
        } else if typical_ns < 1e6 {
            (1e-3, "µs")
        } else if typical_ns < 1e9 {
            (1e-6, "ms")
        } else {
            (1e-9, "s")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        // value (ns per iteration) → amount per second, scaled.
        let (amount, scale, unit) = match *throughput {
            Throughput::Bytes(b) | Throughput::BytesDecimal(b) => (b as f64, 1e-9, "GB/s"),
            Throughput::Elements(flops) => (flops as f64, 1e-12, "TFLOP/s"),
        };
        values.iter_mut().for_each(|ns| {
            *ns = if *ns > 0.0 {
                amount / (*ns * 1e-9) * scale
            } else {
                0.0
            }
        });
        unit
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
