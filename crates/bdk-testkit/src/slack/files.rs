//! Slack's external upload flow: `files.getUploadURLExternal` hands out an
//! upload URL (here, back on the fake), the client POSTs the bytes there
//! (raw, or multipart with a `file` field), and
//! `files.completeUploadExternal` finishes the files and shares them in a
//! conversation or thread as a message with `files`.

use serde_json::{Value, json};

use super::args::{Args, media_type, multipart};
use super::chat::MAX_TEXT;
use super::reply::Reply;
use super::state::{FileRecord, State, bot_message, now_micros};

pub(super) fn get_upload_url(state: &mut State, args: &Args) -> Reply {
    let Some(filename) = args.text("filename") else {
        return Reply::missing("filename");
    };
    let Some(length) = args.text("length") else {
        return Reply::missing("length");
    };
    let Ok(length) = length.parse::<usize>() else {
        return Reply::error_explained(
            "invalid_arguments",
            &["[ERROR] must be an integer [json-pointer:/length]".to_owned()],
        );
    };
    let id = format!("F0FAKE{:05}", state.id());
    let created = u64::try_from(now_micros() / 1_000_000).unwrap_or(u64::MAX);
    state.files.insert(
        id.clone(),
        FileRecord {
            id: id.clone(),
            filename,
            length,
            uploaded: None,
            title: None,
            created,
            shares: Vec::new(),
        },
    );
    Reply::ok(json!({
        "upload_url": format!("{}/upload/{id}", state.base),
        "file_id": id,
    }))
}

/// A POST of a file's bytes to its upload URL: `OK - <length>` when the
/// length is the one announced, 400 otherwise (the file stays not
/// uploaded).
pub(super) fn receive_upload(
    state: &mut State,
    file_id: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Reply {
    let Some(file) = state.files.get_mut(file_id) else {
        return Reply::text(404, "Not Found".to_owned());
    };
    let is_multipart = content_type
        .is_some_and(|content_type| media_type(content_type).0 == "multipart/form-data");
    let received = if is_multipart {
        let parts = content_type.and_then(|content_type| multipart(content_type, body));
        let Some(part) = parts.and_then(|parts| {
            parts
                .into_iter()
                .find(|part| part.name == "file" || part.filename.is_some())
        }) else {
            return Reply::text(400, "multipart body without a file field".to_owned());
        };
        part.data.len()
    } else {
        body.len()
    };
    if received != file.length {
        return Reply::text(
            400,
            format!(
                "length mismatch: expected {} bytes, received {received}",
                file.length
            ),
        );
    }
    file.uploaded = Some(received);
    Reply::text(200, format!("OK - {received}"))
}

pub(super) fn complete_upload(state: &mut State, args: &Args) -> Reply {
    let Some(files) = args.value("files") else {
        return Reply::missing("files");
    };
    let Some(entries) = files.as_array().filter(|entries| !entries.is_empty()) else {
        return Reply::error_explained(
            "invalid_arguments",
            &["[ERROR] must provide a non-empty array [json-pointer:/files]".to_owned()],
        );
    };
    let mut wanted: Vec<(String, Option<String>)> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let Some(id) = entry["id"].as_str() else {
            return Reply::error_explained(
                "invalid_arguments",
                &[format!(
                    "[ERROR] missing required field: id [json-pointer:/files/{index}]"
                )],
            );
        };
        if state
            .files
            .get(id)
            .is_none_or(|file| file.uploaded.is_none())
        {
            return Reply::error("file_not_found");
        }
        wanted.push((id.to_owned(), entry["title"].as_str().map(str::to_owned)));
    }
    let mut channels = Vec::new();
    let named =
        args.text("channel_id")
            .into_iter()
            .chain(args.text("channels").into_iter().flat_map(|list| {
                list.split(',')
                    .map(|channel| channel.trim().to_owned())
                    .filter(|channel| !channel.is_empty())
                    .collect::<Vec<_>>()
            }));
    for channel in named {
        let Some(id) = state.channel_id(&channel) else {
            return Reply::error("channel_not_found");
        };
        if !channels.contains(&id) {
            channels.push(id);
        }
    }
    let comment = args.text("initial_comment").unwrap_or_default();
    if comment.chars().count() > MAX_TEXT {
        return Reply::error("msg_too_long");
    }
    for (id, title) in &wanted {
        if let (Some(file), Some(title)) = (state.files.get_mut(id), title) {
            file.title = Some(title.clone());
        }
    }
    let objects: Vec<Value> = wanted
        .iter()
        .filter_map(|(id, _)| state.files.get(id).map(FileRecord::to_value))
        .collect();
    for channel in &channels {
        let thread_ts = args
            .text("thread_ts")
            .map(|thread_ts| state.thread_root(channel, &thread_ts));
        let ts = state.next_ts();
        let mut message = bot_message(&comment, &ts, thread_ts.as_deref());
        message["files"] = Value::Array(objects.clone());
        message["upload"] = json!(true);
        message["display_as_bot"] = json!(false);
        state.add_message(channel, message);
        for (id, _) in &wanted {
            if let Some(file) = state.files.get_mut(id) {
                file.shares
                    .push(json!({"channel": channel, "thread_ts": thread_ts, "ts": ts}));
            }
        }
    }
    Reply::ok(json!({"files": objects}))
}
