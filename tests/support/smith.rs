//! Random tool components for fuzzing the tool loader: core modules made by
//! wasm-smith with the tool world's exports, wrapped into components.

use wit_component::{ComponentEncoder, StringEncoding, embed_component_metadata};

use crate::hostile::{CORE, tool_world};

/// A random tool: a core module made by wasm-smith from `seed`, with the
/// exports of [`CORE`] (so its `run` and `cabi_realloc` have the world's
/// signatures) and random bodies, wrapped into a component of the tool
/// world. `None` when wit-component cannot wrap what wasm-smith made.
pub fn random_tool(seed: u64) -> Option<Vec<u8>> {
    let exports = wat::parse_str(CORE.replace("BODY", "").replace("EXTRA", "")).expect("the core module parses");
    let mut config = wasm_smith::Config {
        exports: Some(exports),
        available_imports: None,
        // What the tools' engine runs; the rest would only be refused at compilation.
        gc_enabled: false,
        exceptions_enabled: false,
        threads_enabled: false,
        shared_everything_threads_enabled: false,
        memory64_enabled: false,
        tail_call_enabled: false,
        reference_types_enabled: false,
        max_memories: 1,
        max_tables: 2,
        max_funcs: 40,
        max_instructions: 200,
        allow_start_export: true,
        ..wasm_smith::Config::default()
    };
    config.max_table_elements = 1 << 24;
    let mut bytes = vec![0u8; 8192];
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for byte in &mut bytes {
        // xorshift64*: a reproducible stream from the seed.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        *byte = (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8;
    }
    let mut unstructured = arbitrary::Unstructured::new(&bytes);
    let module = wasm_smith::Module::new(config, &mut unstructured).ok()?;
    let mut module = module.to_bytes();
    let (resolve, world) = tool_world();
    embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8).ok()?;
    ComponentEncoder::default().validate(true).module(&module).ok()?.encode().ok()
}
