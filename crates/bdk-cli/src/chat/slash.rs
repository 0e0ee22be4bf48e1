//! What a line typed at the `bdk chat` prompt asks for: a message for the
//! agent, or one of the slash commands.

/// One line from the prompt, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// Text for the agent.
    Message(String),
    /// A slash command.
    Command(Slash),
}

/// The slash commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Slash {
    /// `/help`: list the commands and keys.
    Help,
    /// `/new`: the next message starts a new session.
    New,
    /// `/session ID`: continue that session instead (`None`: no id given,
    /// which shows the current one).
    Session(Option<String>),
    /// `/trace`: the current session's turns and its trace file.
    Trace,
    /// `/reasoning`: show or hide the model's reasoning.
    Reasoning,
    /// `/quit` (or `/exit`): leave.
    Quit,
    /// Anything else that starts with `/`.
    Unknown(String),
}

/// The commands and keys, as `/help` prints them.
pub(crate) const HELP: &str = "\
/new            start a new session with the next message
/session [ID]   continue session ID (without ID: show the current one)
/trace          the session's turns, tool calls and its trace file
/reasoning      show or hide the model's reasoning
/help           this list
/quit           leave (also Ctrl-D, or Ctrl-C twice)
Esc or Ctrl-C stops a reply; y or n answers an approval.
A message that starts with / is written with two: //etc/hosts is sent as /etc/hosts.";

/// Reads a line that is not blank: `//text` is the message `/text`, any
/// other `/word` is a command, the rest is a message as typed.
pub(crate) fn parse(line: &str) -> Input {
    let line = line.trim();
    if let Some(literal) = line.strip_prefix("//") {
        return Input::Message(format!("/{literal}"));
    }
    let Some(command) = line.strip_prefix('/') else {
        return Input::Message(line.to_owned());
    };
    let mut words = command.split_whitespace();
    let name = words.next().unwrap_or_default();
    let rest: Vec<&str> = words.collect();
    let slash = match (name, rest.as_slice()) {
        ("help" | "?", []) => Slash::Help,
        ("new", []) => Slash::New,
        ("session", []) => Slash::Session(None),
        ("session", [id]) => Slash::Session(Some((*id).to_owned())),
        ("trace", []) => Slash::Trace,
        ("reasoning", []) => Slash::Reasoning,
        ("quit" | "exit", []) => Slash::Quit,
        _ => Slash::Unknown(line.to_owned()),
    };
    Input::Command(slash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_as_messages_or_commands() {
        let message = |s: &str| Input::Message(s.to_owned());
        let command = Input::Command;
        for (line, read) in [
            (
                "What's the weather in Paris?",
                message("What's the weather in Paris?"),
            ),
            ("  /new  ", command(Slash::New)),
            (
                "/session ses_1",
                command(Slash::Session(Some("ses_1".into()))),
            ),
            ("/session", command(Slash::Session(None))),
            ("/trace", command(Slash::Trace)),
            ("/reasoning", command(Slash::Reasoning)),
            ("/exit", command(Slash::Quit)),
            ("/?", command(Slash::Help)),
            ("//etc/hosts please", message("/etc/hosts please")),
            (
                "/frobnicate now",
                command(Slash::Unknown("/frobnicate now".into())),
            ),
            (
                "/session a b",
                command(Slash::Unknown("/session a b".into())),
            ),
            ("/", command(Slash::Unknown("/".into()))),
        ] {
            assert_eq!(parse(line), read, "{line:?}");
        }
    }
}
