//! The prompt: a line editor (rustyline) with history kept in a file under
//! the state root, never in the project.
//!
//! rustyline reads the terminal in raw mode and blocks, so each read runs
//! on a blocking thread that the editor travels to and back from. Nothing
//! else reads standard input meanwhile.

use std::path::PathBuf;

use anyhow::{Context, Result};
use rustyline::DefaultEditor;
use rustyline::config::Config;
use rustyline::error::ReadlineError;

/// How many lines the history file keeps.
const HISTORY_LINES: usize = 1000;

/// What one read at the prompt gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// A line, without its newline.
    Line(String),
    /// Ctrl-C.
    Interrupted,
    /// Ctrl-D on an empty line, or the end of input.
    Eof,
}

/// The line editor and where its history lives.
pub(crate) struct Prompt {
    editor: Option<DefaultEditor>,
    history: Option<PathBuf>,
}

impl Prompt {
    /// An editor with the history of `history` loaded, when given and
    /// readable (a history that cannot be read only costs the history).
    pub(crate) fn new(history: Option<PathBuf>) -> Result<Prompt> {
        let config = Config::builder()
            .max_history_size(HISTORY_LINES)
            .context("failed to configure the line editor")?
            .history_ignore_dups(true)
            .context("failed to configure the line editor")?
            .history_ignore_space(true)
            .auto_add_history(false)
            .build();
        let mut editor =
            DefaultEditor::with_config(config).context("failed to start the line editor")?;
        if let Some(path) = &history
            && path.exists()
            && let Err(e) = editor.load_history(path)
        {
            errln!(
                "warning: could not read the chat history {}: {e}",
                path.display()
            );
        }
        Ok(Prompt {
            editor: Some(editor),
            history,
        })
    }

    /// Shows `prompt` and reads one line.
    pub(crate) async fn read(&mut self, prompt: &str) -> Result<Read> {
        let mut editor = self
            .editor
            .take()
            .context("the line editor was lost after an earlier failure")?;
        let prompt = prompt.to_owned();
        let (editor, read) = tokio::task::spawn_blocking(move || {
            let read = editor.readline(&prompt);
            (editor, read)
        })
        .await
        .context("the line editor stopped")?;
        self.editor = Some(editor);
        match read {
            Ok(line) => Ok(Read::Line(line)),
            Err(ReadlineError::Interrupted) => Ok(Read::Interrupted),
            Err(ReadlineError::Eof) => Ok(Read::Eof),
            Err(e) => Err(e).context("failed to read a line"),
        }
    }

    /// Adds `line` to the history and to its file.
    pub(crate) fn remember(&mut self, line: &str) {
        let Some(editor) = self.editor.as_mut() else {
            return;
        };
        if !matches!(editor.add_history_entry(line), Ok(true)) {
            return;
        }
        if let Some(path) = &self.history {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            if let Err(e) = editor.append_history(path) {
                errln!(
                    "warning: could not write the chat history {}: {e}",
                    path.display()
                );
                // Say it once.
                self.history = None;
            }
        }
    }
}
