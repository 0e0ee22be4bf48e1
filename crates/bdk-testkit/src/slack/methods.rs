//! The Web API methods the fake serves: their names, the scopes Slack
//! accepts for each (the `x-accepted-oauth-scopes` header), the one a call
//! needs (by conversation type where Slack decides that way), and the
//! dispatch to the file that implements each.

use super::args::Args;
use super::reply::Reply;
use super::state::{Kind, State};
use super::{chat, conversations, files, identity};

/// Which scope a call needs.
#[derive(Debug, Clone, Copy)]
enum Needs {
    /// None at all (`auth.test`).
    Nothing,
    /// Always this one.
    Scope(&'static str),
    /// Per the kind of the `channel` argument: public, private, DM.
    ByChannel(&'static str, &'static str, &'static str),
}

/// One Web API method.
#[derive(Debug)]
pub(super) struct Method {
    pub(super) name: &'static str,
    /// Every scope Slack accepts for it, as its header lists them.
    pub(super) accepted: &'static [&'static str],
    needs: Needs,
}

const METHODS: &[Method] = &[
    Method {
        name: "auth.test",
        accepted: &[],
        needs: Needs::Nothing,
    },
    Method {
        name: "chat.postMessage",
        accepted: &["chat:write"],
        needs: Needs::Scope("chat:write"),
    },
    Method {
        name: "chat.update",
        accepted: &["chat:write"],
        needs: Needs::Scope("chat:write"),
    },
    Method {
        name: "chat.postEphemeral",
        accepted: &["chat:write"],
        needs: Needs::Scope("chat:write"),
    },
    Method {
        name: "chat.delete",
        accepted: &["chat:write"],
        needs: Needs::Scope("chat:write"),
    },
    Method {
        name: "conversations.replies",
        accepted: &[
            "channels:history",
            "groups:history",
            "im:history",
            "mpim:history",
        ],
        needs: Needs::ByChannel("channels:history", "groups:history", "im:history"),
    },
    Method {
        name: "conversations.info",
        accepted: &["channels:read", "groups:read", "im:read", "mpim:read"],
        needs: Needs::ByChannel("channels:read", "groups:read", "im:read"),
    },
    Method {
        name: "files.getUploadURLExternal",
        accepted: &["files:write"],
        needs: Needs::Scope("files:write"),
    },
    Method {
        name: "files.completeUploadExternal",
        accepted: &["files:write"],
        needs: Needs::Scope("files:write"),
    },
    Method {
        name: "users.info",
        accepted: &["users:read"],
        needs: Needs::Scope("users:read"),
    },
];

/// The method called `name`, if the fake serves it.
pub(super) fn find(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|method| method.name == name)
}

impl Method {
    /// The scope this call needs, if any: for a conversation method, the
    /// one for the kind of conversation its `channel` argument names.
    pub(super) fn needed_scope(&self, args: &Args) -> Option<&'static str> {
        match self.needs {
            Needs::Nothing => None,
            Needs::Scope(scope) => Some(scope),
            Needs::ByChannel(public, private, im) => {
                match Kind::of(&args.text("channel").unwrap_or_default()) {
                    Kind::Public => Some(public),
                    Kind::Private => Some(private),
                    Kind::Im => Some(im),
                }
            }
        }
    }

    /// Runs the method on an authorized call.
    pub(super) fn call(&self, state: &mut State, args: &Args) -> Reply {
        match self.name {
            "auth.test" => identity::auth_test(),
            "users.info" => identity::users_info(state, args),
            "chat.postMessage" => chat::post_message(state, args),
            "chat.update" => chat::update(state, args),
            "chat.delete" => chat::delete(state, args),
            "chat.postEphemeral" => chat::post_ephemeral(state, args),
            "conversations.replies" => conversations::replies(state, args),
            "conversations.info" => conversations::info(state, args),
            "files.getUploadURLExternal" => files::get_upload_url(state, args),
            "files.completeUploadExternal" => files::complete_upload(state, args),
            other => Reply::error_with("unknown_method", serde_json::json!({"req_method": other})),
        }
    }
}
