//! Process-wide cache of specialized, optimized kernel IR.
//!
//! Specialization plus the optimization passes take milliseconds per kernel; a test suite
//! or a serving loop asks for the same few configurations over and over. The key is the
//! module's content hash, the kernel name and the bindings (name = value, in the order
//! given), so two modules that differ in any byte never share an entry. The IR is plain
//! data (`Send + Sync`), unlike the parsed module, so one cache serves every thread.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use attn_dsl::ir::Function;
use attn_dsl::{specialize, Binding, DslError};

use super::dsl_module::DslModule;

type Cache = Mutex<BTreeMap<String, Arc<Function>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// The cache key of one specialization request.
pub fn specialization_key(module: &DslModule, kernel: &str, bindings: &[Binding]) -> String {
    let b: Vec<String> = bindings
        .iter()
        .map(|b| format!("{}={}", b.name, b.value))
        .collect();
    format!("{}:{kernel}<{}>", module.source_hash(), b.join(","))
}

/// The optimized IR of `kernel` specialized on `bindings`, computed once per process.
pub fn specialize_cached(
    module: &DslModule,
    kernel: &str,
    bindings: &[Binding],
) -> Result<Arc<Function>, DslError> {
    let key = specialization_key(module, kernel, bindings);
    if let Some(f) = lock(cache()).get(&key) {
        return Ok(f.clone());
    }
    // Specialize outside the lock: another thread may race us to the same key, which
    // costs one duplicate specialization, never a wrong entry (same key, same bytes).
    let mut spec = specialize(module.module(), kernel, bindings)?;
    attn_dsl::passes::optimize(&mut spec.ir);
    let f = Arc::new(spec.ir);
    lock(cache()).insert(key, f.clone());
    Ok(f)
}

/// Number of cached specializations (for tests of the cache itself).
pub fn cached_count() -> usize {
    lock(cache()).len()
}

/// A poisoned lock only means another thread panicked mid-insert of a complete value;
/// the map is still consistent, so keep using it.
fn lock(c: &Cache) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Function>>> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}
