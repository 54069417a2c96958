//! A component's shape, read from its bytes before anything is compiled:
//! how many core instances it creates when instantiated, and the memories
//! and tables those instances start with. A component whose shape is over a
//! call's [`Limits`] is refused before it costs a compilation; what the shape
//! cannot tell (growth during a call) the call's budget holds at run time.
//!
//! Index spaces are followed as the component model defines them: a module
//! (or nested component) counts once per instantiation, not once per
//! definition, and modules and components reached through aliases or imports
//! are followed where they come from (an imported one creates nothing here).

use wasmparser::{ComponentAlias, ComponentExternalKind, ComponentOuterAliasKind, ComponentTypeRef, Encoding, Instance, Parser, Payload};

use crate::engine::Limits;

/// What instantiating a component creates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Core instances created by instantiation (modules instantiated).
    pub core_instances: u64,
    /// Linear memories those instances define.
    pub memories: u64,
    /// Tables those instances define.
    pub tables: u64,
    /// Bytes of linear memory they start with, all together.
    pub initial_memory_bytes: u64,
    /// Table elements they start with, all together.
    pub initial_table_elements: u64,
}

impl Shape {
    fn add(&mut self, other: &Shape) {
        self.core_instances = self.core_instances.saturating_add(other.core_instances);
        self.memories = self.memories.saturating_add(other.memories);
        self.tables = self.tables.saturating_add(other.tables);
        self.initial_memory_bytes = self.initial_memory_bytes.saturating_add(other.initial_memory_bytes);
        self.initial_table_elements = self.initial_table_elements.saturating_add(other.initial_table_elements);
    }

    /// The first of `limits` this shape is over, said as a refusal.
    pub fn check(&self, limits: &Limits) -> Result<(), String> {
        let over = |what: &str, n: u64, max: usize| Err(format!("instantiating it creates {n} {what}, more than the {max} allowed"));
        if self.core_instances > limits.instances as u64 {
            return over("core instances", self.core_instances, limits.instances);
        }
        if self.memories > limits.memories as u64 {
            return over("memories", self.memories, limits.memories);
        }
        if self.tables > limits.tables as u64 {
            return over("tables", self.tables, limits.tables);
        }
        if self.initial_memory_bytes > limits.memory_bytes as u64 {
            return Err(format!(
                "its memories start at {} bytes together, more than the {} a call may hold",
                self.initial_memory_bytes, limits.memory_bytes
            ));
        }
        if self.initial_table_elements > limits.table_elements as u64 {
            return Err(format!(
                "its tables start with {} elements together, more than the {} a call may hold",
                self.initial_table_elements, limits.table_elements
            ));
        }
        Ok(())
    }
}

/// One level of nesting: a component (its module and component index
/// spaces, each entry with what instantiating it creates, and what its own
/// instantiations add up to) or a core module (its memories and tables).
#[derive(Default)]
struct Level {
    component: bool,
    modules: Vec<Shape>,
    components: Vec<Shape>,
    made: Shape,
}

/// Reads the shape of `wasm`, a component (or a core module).
pub fn shape(wasm: &[u8]) -> Result<Shape, String> {
    let mut stack: Vec<Level> = Vec::new();
    let mut finished: Option<Shape> = None;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| format!("not a WebAssembly component: {e}"))?;
        match payload {
            Payload::Version { encoding, .. } => {
                stack.push(Level { component: encoding == Encoding::Component, ..Level::default() });
            }
            Payload::MemorySection(reader) => {
                let level = stack.last_mut().ok_or("a memory section outside a module")?;
                for memory in reader {
                    let memory = memory.map_err(|e| e.to_string())?;
                    let page = 1u64 << memory.page_size_log2.unwrap_or(16).min(63);
                    level.made.memories += 1;
                    level.made.initial_memory_bytes = level.made.initial_memory_bytes.saturating_add(memory.initial.saturating_mul(page));
                }
            }
            Payload::TableSection(reader) => {
                let level = stack.last_mut().ok_or("a table section outside a module")?;
                for table in reader {
                    let table = table.map_err(|e| e.to_string())?;
                    level.made.tables += 1;
                    level.made.initial_table_elements = level.made.initial_table_elements.saturating_add(table.ty.initial);
                }
            }
            Payload::InstanceSection(reader) => {
                let level = stack.last_mut().ok_or("an instance section outside a component")?;
                for instance in reader {
                    if let Instance::Instantiate { module_index, .. } = instance.map_err(|e| e.to_string())? {
                        let module = level.modules.get(module_index as usize).copied().unwrap_or_default();
                        level.made.core_instances += 1;
                        level.made.add(&module);
                    }
                }
            }
            Payload::ComponentInstanceSection(reader) => {
                let level = stack.last_mut().ok_or("an instance section outside a component")?;
                for instance in reader {
                    if let wasmparser::ComponentInstance::Instantiate { component_index, .. } = instance.map_err(|e| e.to_string())? {
                        let component = level.components.get(component_index as usize).copied().unwrap_or_default();
                        level.made.add(&component);
                    }
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader {
                    let alias = alias.map_err(|e| e.to_string())?;
                    let depth = stack.len();
                    let (modules, components) = match alias {
                        ComponentAlias::Outer { kind: ComponentOuterAliasKind::CoreModule, count, index } => {
                            let outer = depth.checked_sub(1 + count as usize).and_then(|i| stack.get(i));
                            (Some(outer.and_then(|l| l.modules.get(index as usize)).copied().unwrap_or_default()), None)
                        }
                        ComponentAlias::Outer { kind: ComponentOuterAliasKind::Component, count, index } => {
                            let outer = depth.checked_sub(1 + count as usize).and_then(|i| stack.get(i));
                            (None, Some(outer.and_then(|l| l.components.get(index as usize)).copied().unwrap_or_default()))
                        }
                        ComponentAlias::InstanceExport { kind: ComponentExternalKind::Module, .. } => (Some(Shape::default()), None),
                        ComponentAlias::InstanceExport { kind: ComponentExternalKind::Component, .. } => (None, Some(Shape::default())),
                        _ => (None, None),
                    };
                    let level = stack.last_mut().ok_or("an alias section outside a component")?;
                    level.modules.extend(modules);
                    level.components.extend(components);
                }
            }
            Payload::ComponentImportSection(reader) => {
                let level = stack.last_mut().ok_or("an import section outside a component")?;
                for import in reader {
                    match import.map_err(|e| e.to_string())?.ty {
                        ComponentTypeRef::Module(_) => level.modules.push(Shape::default()),
                        ComponentTypeRef::Component(_) => level.components.push(Shape::default()),
                        _ => {}
                    }
                }
            }
            Payload::End(_) => {
                let level = stack.pop().ok_or("an end without a beginning")?;
                match stack.last_mut() {
                    // A nested module or component: an entry of its parent's index space.
                    Some(parent) if level.component => parent.components.push(level.made),
                    Some(parent) => parent.modules.push(level.made),
                    None => {
                        // A core module on its own is its own single instance.
                        let mut made = level.made;
                        if !level.component {
                            made.core_instances = 1;
                        }
                        finished = Some(made);
                    }
                }
            }
            _ => {}
        }
    }
    finished.ok_or_else(|| "not a WebAssembly component: it ends early".to_string())
}
