//! The environment a contained program starts with.
//!
//! Only an allowlist of the server's variables passes: what programs need to
//! find their interpreters and speak the user's locale. Everything else (API
//! keys, bearer tokens, store URLs, channel secrets) stays with the server
//! unless the author names it. The caller starts the program from an empty
//! environment (`env_clear`) and adds [`base`] plus its own variables.

/// Variables passed from the server's environment to every program.
pub const ALLOWED: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ"];

/// Prefixes of variables passed from the server's environment (the locale
/// categories).
pub const ALLOWED_PREFIXES: &[&str] = &["LC_"];

/// True when the server's variable `name` passes to programs by default.
pub fn is_allowed(name: &str) -> bool {
    ALLOWED.contains(&name) || ALLOWED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The allowlisted variables of this process's environment, plus the ones
/// named in `pass` (an author's `env = ["GITHUB_TOKEN"]`) that are set.
/// Variables that are not valid Unicode are left out.
pub fn base(pass: &[String]) -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| is_allowed(k) || pass.iter().any(|p| p == k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowlist_is_narrow() {
        for ok in ["PATH", "HOME", "LANG", "TZ", "LC_ALL", "LC_CTYPE"] {
            assert!(is_allowed(ok), "{ok}");
        }
        for no in [
            "BDK_BEARER_TOKEN",
            "BDK_STORE",
            "AWS_SECRET_ACCESS_KEY",
            "XAI_API_KEY",
            "LD_PRELOAD",
            "PYTHONPATH",
            "path",
        ] {
            assert!(!is_allowed(no), "{no}");
        }
    }

    #[test]
    fn named_variables_pass_when_set() {
        let base = base(&["PATH".to_owned(), "BDK_SURELY_UNSET_VARIABLE".to_owned()]);
        assert!(base.iter().all(|(k, _)| is_allowed(k)));
        assert!(!base.iter().any(|(k, _)| k == "BDK_SURELY_UNSET_VARIABLE"));
    }
}
