//! `bdk completions <SHELL>` and `bdk man`: a shell completion script and
//! the man pages, generated from the same clap definitions the parser
//! uses, so they never drift from the commands.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::args::Cli;

/// Writes the completion script for `shell` to stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "bdk", &mut out);
    std::io::stdout()
        .write_all(&out)
        .context("cannot write the completion script")
}

/// Writes `bdk.1` to stdout, or, with `out_dir`, `bdk.1` and one page per
/// command (`bdk-serve.1`, `bdk-github-replay.1`, ...) into that folder.
pub(crate) fn man(out_dir: Option<&Path>) -> Result<()> {
    let cmd = Cli::command();
    let Some(dir) = out_dir else {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut out)
            .context("cannot render the man page")?;
        return std::io::stdout()
            .write_all(&out)
            .context("cannot write the man page");
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let written = write_pages(&cmd, "bdk", dir)?;
    errln!("wrote {written} man pages to {}", dir.display());
    Ok(())
}

/// Writes the page of `cmd` as `<name>.1` and those of its subcommands
/// (except `help`); the number written.
fn write_pages(cmd: &clap::Command, name: &str, dir: &Path) -> Result<usize> {
    let page = cmd.clone().name(name.to_owned());
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .context("cannot render a man page")?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
    let mut written = 1;
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        written += write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(written)
}
