//! Who is calling an MCP endpoint, and which sessions that caller may read.

/// Who is calling: the owner of the sessions `ask` creates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The principal name sessions are owned by.
    pub name: String,
    /// Reads (`check`, resources) may see every session, not only the
    /// caller's own (dev mode on loopback, anonymous auth, the local stdio
    /// user).
    pub sees_all: bool,
}

impl Principal {
    /// The local operator of `bdk mcp`: principal `local`, sees every session.
    pub fn local() -> Self {
        Self {
            name: "local".to_owned(),
            sees_all: true,
        }
    }

    /// The owner filter of the host's session reads: `None` reads every
    /// session, `Some(name)` only that principal's (and unowned ones).
    pub fn read_scope(&self) -> Option<&str> {
        (!self.sees_all).then_some(self.name.as_str())
    }

    /// Whether the caller may see a record owned by `owner` where the
    /// session API checks owners exactly (artifacts: an unowned one is only
    /// for callers that see everything).
    pub fn owns(&self, owner: Option<&str>) -> bool {
        self.sees_all || owner == Some(self.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_principal_reads_every_session() {
        assert_eq!(Principal::local().read_scope(), None);
        assert!(Principal::local().owns(None));
        let alice = Principal {
            name: "alice".to_owned(),
            sees_all: false,
        };
        assert_eq!(alice.read_scope(), Some("alice"));
        assert!(alice.owns(Some("alice")));
        assert!(!alice.owns(Some("bob")));
        assert!(!alice.owns(None));
    }
}
