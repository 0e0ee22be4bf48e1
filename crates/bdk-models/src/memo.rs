//! A value derived from a set of tool definitions, kept while the same set
//! comes back.
//!
//! A turn builds its definitions once and every step's request shares them
//! (`ModelRequest::tools` is an `Arc`), and an agent whose tools do not
//! change hands the same `Arc` to every turn. So what a model derives from
//! them (their wire form, their size) is worth deriving once per set rather
//! than once per step.

use std::sync::{Arc, Mutex, PoisonError};

use crate::ToolDefinition;

/// The last set of definitions seen and what was derived from it. The set
/// is held, not just its address, so the address cannot be reused by a
/// different set while it is remembered.
pub(crate) struct ToolsMemo<T> {
    last: Mutex<Option<(Arc<[ToolDefinition]>, T)>>,
}

impl<T> Default for ToolsMemo<T> {
    fn default() -> Self {
        Self {
            last: Mutex::new(None),
        }
    }
}

impl<T: Clone> ToolsMemo<T> {
    /// What `derive` makes of `tools`: remembered from the last call when
    /// `tools` is the same `Arc`, derived (and remembered) otherwise.
    pub(crate) fn get(
        &self,
        tools: &Arc<[ToolDefinition]>,
        derive: impl FnOnce(&[ToolDefinition]) -> T,
    ) -> T {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, value)) = last.as_ref()
            && Arc::ptr_eq(seen, tools)
        {
            return value.clone();
        }
        let value = derive(tools);
        *last = Some((Arc::clone(tools), value.clone()));
        value
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use serde_json::json;

    use super::*;

    fn set(name: &str) -> Arc<[ToolDefinition]> {
        vec![ToolDefinition {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        }]
        .into()
    }

    #[test]
    fn a_set_is_derived_once_while_it_comes_back_and_again_when_it_changes() {
        let memo = ToolsMemo::default();
        let runs = Cell::new(0);
        let name = |tools: &[ToolDefinition]| {
            runs.set(runs.get() + 1);
            tools[0].name.clone()
        };
        let a = set("a");
        assert_eq!(memo.get(&a, name), "a");
        assert_eq!(memo.get(&Arc::clone(&a), name), "a");
        assert_eq!(runs.get(), 1);
        // An equal set in another allocation is another set: derived again.
        let b = set("a");
        assert_eq!(memo.get(&b, name), "a");
        assert_eq!(runs.get(), 2);
        let c = set("c");
        assert_eq!(memo.get(&c, name), "c");
        assert_eq!(memo.get(&a, name), "a");
        assert_eq!(runs.get(), 4);
    }
}
