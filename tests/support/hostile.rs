//! Hostile tool components, built here from WebAssembly text: a core module
//! that implements the tool world's canonical ABI by hand, wrapped into a
//! component of `anchor:tool/tool@1.0.0` with wit-component, and, for the
//! ones a language's compiler would never emit, extra core modules and
//! instances appended as component sections.
//!
//! The module's `run` answers `ok` with an empty report after doing what
//! the test asks (`body`); its `cabi_realloc` is a bump allocator.

use wasm_encoder::{ComponentSection, ComponentSectionId, InstanceSection, RawSection};
use wit_component::{ComponentEncoder, StringEncoding, embed_component_metadata};
use wit_parser::Resolve;

/// The canonical ABI of `run: func(input) -> result<report, string>`:
/// `input` flattens to (today, observations.ptr, observations.len), the
/// result goes through a return area whose address is returned. The area is
/// the first 32 bytes of memory (zeroes: `ok`, three empty lists); the
/// allocator starts above it.
pub const CORE: &str = r#"
(module
  EXTRA
  (memory (export "memory") 1)
  (table $table (export "table") 1 funcref)
  (global $heap (mut i32) (i32.const 1024))
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
    (local $at i32)
    (local.set $at
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $at) (local.get $size)))
    (block $fits
      (loop $grow
        (br_if $fits (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then unreachable))
        (br $grow)))
    (local.get $at))
  (func (export "run") (param $today i32) (param $observations i32) (param $count i32) (result i32)
    BODY
    (i32.const 0))
)
"#;

/// The tool world's WIT, as released (read relative to this file, so that
/// every crate including it finds it).
const TOOL_WIT: &str = include_str!("../../wit/tool@1.0.0/tool.wit");

pub fn tool_world() -> (Resolve, wit_parser::WorldId) {
    let mut resolve = Resolve::default();
    let package = resolve.push_str("tool.wit", TOOL_WIT).expect("the tool world's WIT parses");
    let world = resolve.select_world(&[package], Some("tool")).expect("the tool world");
    (resolve, world)
}

/// A component of the tool world whose `run` executes `body` (WebAssembly
/// text, instructions with no result) and then answers an empty report.
pub fn tool_running(body: &str) -> Vec<u8> {
    tool_with(body, "")
}

/// [`tool_running`] with `extra` module fields (functions, say) besides.
fn tool_with(body: &str, extra: &str) -> Vec<u8> {
    let mut module = wat::parse_str(CORE.replace("BODY", body).replace("EXTRA", extra)).expect("the core module parses");
    let (resolve, world) = tool_world();
    embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8).expect("metadata embeds");
    ComponentEncoder::default().validate(true).module(&module).expect("a tool module").encode().expect("the component encodes")
}

/// A well-behaved tool with `functions` more functions of some arithmetic
/// each: a large component that costs its compilation.
pub fn big_tool(functions: usize) -> Vec<u8> {
    let mut extra = String::new();
    for i in 0..functions {
        extra.push_str(&format!(
            "(func (param i32 i32) (result i32) (local i32)
               (local.set 2 (i32.mul (local.get 0) (i32.const {i})))
               (local.set 2 (i32.xor (local.get 2) (i32.rotl (local.get 1) (i32.const 7))))
               (if (i32.gt_s (local.get 2) (i32.const 1000)) (then (local.set 2 (i32.sub (local.get 2) (local.get 1)))))
               (i32.add (local.get 2) (i32.popcnt (local.get 0))))\n"
        ));
    }
    tool_with("", &extra)
}

/// A well-behaved tool: an empty report.
pub fn empty_tool() -> Vec<u8> {
    tool_running("")
}

/// A tool whose run grows its table by 2^31 - 1 elements in one instruction
/// (tens of GiB, were it allocated).
pub fn table_grower() -> Vec<u8> {
    tool_running("(drop (table.grow $table (ref.null func) (i32.const 0x7fffffff)))")
}

/// A tool whose run grows its one memory a page at a time, touching each,
/// until the growth fails, then traps.
pub fn memory_grower() -> Vec<u8> {
    tool_running(
        "(block $done (loop $more
           (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
           (i32.store8 (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 1)) (i32.const 1))
           (br $more)))
         unreachable",
    )
}

/// A core module that starts with `pages` pages and, when it is
/// instantiated, grows by `grow` more and writes to every page.
fn hog(pages: u32, grow: u32) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
             (memory {pages})
             (func $touch (local $page i32)
               (drop (memory.grow (i32.const {grow})))
               (block $done (loop $next
                 (br_if $done (i32.ge_u (local.get $page) (memory.size)))
                 (i32.store8 (i32.mul (local.get $page) (i32.const 65536)) (i32.const 1))
                 (local.set $page (i32.add (local.get $page) (i32.const 1)))
                 (br $next))))
             (start $touch))"#
    ))
    .expect("the hog module parses")
}

/// The empty tool with `copies` extra core instances of a module that
/// holds `pages` pages from the start and grows `grow` more when
/// instantiated, touching all of them.
pub fn with_hogs(copies: u32, pages: u32, grow: u32) -> Vec<u8> {
    let mut component = empty_tool();
    // The new module's index: after every core module the component defines.
    let modules =
        wasmparser::Parser::new(0).parse_all(&component).filter(|p| matches!(p, Ok(wasmparser::Payload::ModuleSection { .. }))).count()
            as u32;
    let hog = hog(pages, grow);
    RawSection { id: ComponentSectionId::CoreModule.into(), data: &hog }.append_to_component(&mut component);
    let mut instances = InstanceSection::new();
    for _ in 0..copies {
        instances.instantiate(modules, Vec::<(&str, wasm_encoder::ModuleArg)>::new());
    }
    instances.append_to_component(&mut component);
    component
}
