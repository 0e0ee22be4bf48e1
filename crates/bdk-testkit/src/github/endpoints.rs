//! The repository endpoints: pull requests (JSON, diff, files), issues,
//! comments, commit statuses, reviews and file contents, with GitHub's
//! validation rules and error bodies.

use std::collections::BTreeMap;

use chrono::Utc;
use serde_json::{Value, json};

use super::record::{DOCS, MAX_COMMENT, MAX_STATUS_DESCRIPTION};
use super::server::{Reply, ReplyBody, Req};
use super::state::{PullFile, State, unified_diff};
use super::text::{count_changes, diff_lines, sha1_hex, timestamp, wrapped_base64};

impl State {
    pub(super) fn existing_pull(&self, repo: &str, number: &str) -> Option<u64> {
        let number = number.parse().ok()?;
        self.repos
            .get(repo)?
            .pulls
            .contains_key(&number)
            .then_some(number)
    }

    /// An issue number that exists, as an issue or a pull request.
    pub(super) fn existing_issue(&self, repo: &str, number: &str) -> Option<u64> {
        let number = number.parse().ok()?;
        let repo = self.repos.get(repo)?;
        (repo.issues.contains_key(&number) || repo.pulls.contains_key(&number)).then_some(number)
    }

    pub(super) fn get_pull(&self, req: &Req<'_>, repo: &str, number: &str) -> Reply {
        let Some(number) = self.existing_pull(repo, number) else {
            return Reply::not_found();
        };
        let pull = &self.repos[repo].pulls[&number];
        let accept = req.header("accept").unwrap_or("");
        if accept.contains("application/vnd.github.diff")
            || accept.contains("application/vnd.github.v3.diff")
        {
            return Reply {
                status: 200,
                headers: Vec::new(),
                body: ReplyBody::Raw {
                    content_type: "application/vnd.github.diff; charset=utf-8",
                    bytes: unified_diff(&pull.files).into_bytes(),
                },
            };
        }
        Reply::json(200, pull.value.clone())
    }

    pub(super) fn list_pull_files(&self, req: &Req<'_>, repo: &str, number: &str) -> Reply {
        let Some(number) = self.existing_pull(repo, number) else {
            return Reply::not_found();
        };
        let head = self.repos[repo].pulls[&number].value["head"]["sha"]
            .as_str()
            .unwrap_or("HEAD")
            .to_owned();
        let files = self.repos[repo].pulls[&number]
            .files
            .iter()
            .map(|file| {
                let (additions, deletions) = count_changes(&file.patch);
                json!({
                    "sha": sha1_hex(format!("{}:{}", file.path, file.patch).as_bytes()),
                    "filename": file.path,
                    "status": file.status,
                    "additions": additions,
                    "deletions": deletions,
                    "changes": additions + deletions,
                    "blob_url": format!("https://github.com/{repo}/blob/{head}/{}", file.path),
                    "raw_url": format!("https://github.com/{repo}/raw/{head}/{}", file.path),
                    "contents_url": format!("{}/repos/{repo}/contents/{}?ref={head}", self.base, file.path),
                    "patch": file.patch,
                })
            })
            .collect();
        self.page(req, files)
    }

    pub(super) fn get_issue(&self, repo: &str, number: &str) -> Reply {
        let Some(number) = self.existing_issue(repo, number) else {
            return Reply::not_found();
        };
        let entry = &self.repos[repo];
        if let Some(issue) = entry.issues.get(&number) {
            return Reply::json(200, issue.clone());
        }
        // A pull request seen as an issue, as GitHub serves it.
        let pull = &entry.pulls[&number].value;
        let comments = entry.comments.get(&number).map_or(0, Vec::len);
        Reply::json(
            200,
            json!({
                "url": format!("{}/repos/{repo}/issues/{number}", self.base),
                "html_url": pull["html_url"],
                "number": number,
                "title": pull["title"],
                "user": pull["user"],
                "labels": pull.get("labels").cloned().unwrap_or_else(|| json!([])),
                "state": pull["state"],
                "locked": pull.get("locked").cloned().unwrap_or(Value::Bool(false)),
                "comments": comments,
                "created_at": pull["created_at"],
                "updated_at": pull["updated_at"],
                "body": pull["body"],
                "pull_request": {
                    "url": format!("{}/repos/{repo}/pulls/{number}", self.base),
                    "html_url": pull["html_url"],
                    "diff_url": pull["diff_url"],
                    "patch_url": pull["patch_url"],
                },
            }),
        )
    }

    pub(super) fn create_comment(
        &mut self,
        repo: &str,
        number: &str,
        body: &Value,
        author: Value,
    ) -> Reply {
        let Some(number) = self.existing_issue(repo, number) else {
            return Reply::not_found();
        };
        let Some(text) = body["body"].as_str() else {
            return Reply::invalid("IssueComment", "body", "missing_field");
        };
        if text.chars().count() > MAX_COMMENT {
            return Reply::invalid_custom(
                "IssueComment",
                "body",
                &format!("body is too long (maximum is {MAX_COMMENT} characters)"),
            );
        }
        let id = self.id();
        let now = timestamp(Utc::now());
        let kind = if self.repos[repo].pulls.contains_key(&number) {
            "pull"
        } else {
            "issues"
        };
        let url = format!("{}/repos/{repo}/issues/comments/{id}", self.base);
        let comment = json!({
            "id": id,
            "node_id": format!("IC_fake{id}"),
            "url": url,
            "html_url": format!("https://github.com/{repo}/{kind}/{number}#issuecomment-{id}"),
            "issue_url": format!("{}/repos/{repo}/issues/{number}", self.base),
            "body": text,
            "user": author,
            "created_at": now,
            "updated_at": now,
            "author_association": "NONE",
        });
        if let Some(repo) = self.repos.get_mut(repo) {
            repo.comments
                .entry(number)
                .or_default()
                .push(comment.clone());
        }
        Reply::json(201, comment).with_header("location", url)
    }

    pub(super) fn find_comment(&self, repo: &str, id: &str) -> Option<(u64, usize)> {
        let id: u64 = id.parse().ok()?;
        self.repos
            .get(repo)?
            .comments
            .iter()
            .find_map(|(number, comments)| {
                comments
                    .iter()
                    .position(|comment| comment["id"] == id)
                    .map(|index| (*number, index))
            })
    }

    pub(super) fn update_comment(&mut self, repo: &str, id: &str, body: &Value) -> Reply {
        let Some((number, index)) = self.find_comment(repo, id) else {
            return Reply::not_found();
        };
        let Some(text) = body["body"].as_str() else {
            return Reply::invalid("IssueComment", "body", "missing_field");
        };
        if text.chars().count() > MAX_COMMENT {
            return Reply::invalid_custom(
                "IssueComment",
                "body",
                &format!("body is too long (maximum is {MAX_COMMENT} characters)"),
            );
        }
        let Some(comment) = self
            .repos
            .get_mut(repo)
            .and_then(|repo| repo.comments.get_mut(&number))
            .and_then(|comments| comments.get_mut(index))
        else {
            return Reply::not_found();
        };
        comment["body"] = Value::from(text);
        comment["updated_at"] = Value::from(timestamp(Utc::now()));
        Reply::json(200, comment.clone())
    }

    pub(super) fn create_status(
        &mut self,
        repo: &str,
        sha: &str,
        body: &Value,
        author: Value,
    ) -> Reply {
        let state = body["state"].as_str().unwrap_or("");
        if !matches!(state, "error" | "failure" | "pending" | "success") {
            return Reply::invalid("Status", "state", "custom");
        }
        let description = body["description"].as_str();
        if description.is_some_and(|text| text.chars().count() > MAX_STATUS_DESCRIPTION) {
            return Reply::invalid_custom(
                "Status",
                "description",
                &format!(
                    "description is too long (maximum is {MAX_STATUS_DESCRIPTION} characters)"
                ),
            );
        }
        let id = self.id();
        let now = timestamp(Utc::now());
        let url = format!("{}/repos/{repo}/statuses/{sha}", self.base);
        let status = json!({
            "url": url,
            "avatar_url": null,
            "id": id,
            "node_id": format!("SC_fake{id}"),
            "state": state,
            "description": description,
            "target_url": body["target_url"].as_str(),
            "context": body["context"].as_str().unwrap_or("default"),
            "created_at": now,
            "updated_at": now,
            "creator": author,
        });
        if let Some(repo) = self.repos.get_mut(repo) {
            repo.statuses
                .entry(sha.to_owned())
                .or_default()
                .push(status.clone());
        }
        Reply::json(201, status).with_header("location", url)
    }

    pub(super) fn create_review(
        &mut self,
        repo: &str,
        number: &str,
        body: &Value,
        author: Value,
    ) -> Reply {
        let Some(number) = self.existing_pull(repo, number) else {
            return Reply::not_found();
        };
        let event = body["event"].as_str();
        let state = match event {
            None => "PENDING",
            Some("APPROVE") => "APPROVED",
            Some("REQUEST_CHANGES") => "CHANGES_REQUESTED",
            Some("COMMENT") => "COMMENTED",
            Some(_) => return Reply::invalid("PullRequestReview", "event", "invalid"),
        };
        let text = body["body"].as_str().unwrap_or("");
        let comments = body["comments"].as_array().cloned().unwrap_or_default();
        if text.is_empty()
            && (event == Some("REQUEST_CHANGES")
                || (event == Some("COMMENT") && comments.is_empty()))
        {
            return Reply::json(
                422,
                json!({"message": "Unprocessable Entity", "errors": ["Review body can't be blank"], "documentation_url": DOCS}),
            );
        }
        let pull = &self.repos[repo].pulls[&number];
        for comment in &comments {
            if let Err(reply) = check_review_comment(comment, &pull.files) {
                return reply;
            }
        }
        let head = pull.value["head"]["sha"].as_str().unwrap_or("").to_owned();
        let id = self.id();
        let mut review = json!({
            "id": id,
            "node_id": format!("PRR_fake{id}"),
            "user": author,
            "body": text,
            "state": state,
            "html_url": format!("https://github.com/{repo}/pull/{number}#pullrequestreview-{id}"),
            "pull_request_url": format!("{}/repos/{repo}/pulls/{number}", self.base),
            "author_association": "NONE",
            "commit_id": body["commit_id"].as_str().unwrap_or(&head),
        });
        if state != "PENDING" {
            review["submitted_at"] = Value::from(timestamp(Utc::now()));
        }
        let mut stored = review.clone();
        stored["comments"] = Value::Array(comments);
        if let Some(repo) = self.repos.get_mut(repo) {
            repo.reviews.entry(number).or_default().push(stored);
        }
        Reply::json(200, review)
    }

    pub(super) fn get_contents(&self, req: &Req<'_>, repo: &str, path: &str) -> Reply {
        let entry = &self.repos[repo];
        let git_ref = req.query("ref").unwrap_or_else(|| {
            entry.value["default_branch"]
                .as_str()
                .unwrap_or("main")
                .to_owned()
        });
        let path = path.trim_matches('/');
        if let Some(content) = entry.files.get(&(git_ref.clone(), path.to_owned())) {
            if req
                .header("accept")
                .is_some_and(|accept| accept.contains("application/vnd.github.raw"))
            {
                return Reply {
                    status: 200,
                    headers: Vec::new(),
                    body: ReplyBody::Raw {
                        content_type: "application/vnd.github.raw; charset=utf-8",
                        bytes: content.clone(),
                    },
                };
            }
            return Reply::json(200, self.content_entry(repo, &git_ref, path, Some(content)));
        }
        // A directory: the entries directly under it.
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        let mut listing: BTreeMap<String, Value> = BTreeMap::new();
        for (file_ref, file_path) in entry.files.keys() {
            if *file_ref != git_ref {
                continue;
            }
            let Some(rest) = file_path.strip_prefix(&prefix) else {
                continue;
            };
            let item = match rest.split_once('/') {
                Some((dir, _)) => {
                    let dir_path = format!("{prefix}{dir}");
                    let mut value = self.content_entry(repo, &git_ref, &dir_path, None);
                    value["type"] = Value::from("dir");
                    (dir_path, value)
                }
                None => {
                    let content = &entry.files[&(file_ref.clone(), file_path.clone())];
                    let mut value = self.content_entry(repo, &git_ref, file_path, Some(content));
                    if let Some(object) = value.as_object_mut() {
                        object.remove("content");
                        object.remove("encoding");
                    }
                    (file_path.clone(), value)
                }
            };
            listing.insert(item.0, item.1);
        }
        if listing.is_empty() {
            return Reply::not_found();
        }
        Reply::json(200, Value::Array(listing.into_values().collect()))
    }

    /// A contents entry as GitHub gives it: the file's base64 content
    /// wrapped every 60 characters, its git blob sha and size.
    pub(super) fn content_entry(
        &self,
        repo: &str,
        git_ref: &str,
        path: &str,
        content: Option<&Vec<u8>>,
    ) -> Value {
        let name = path.rsplit('/').next().unwrap_or(path);
        let sha = match content {
            Some(bytes) => {
                let mut blob = format!("blob {}\0", bytes.len()).into_bytes();
                blob.extend_from_slice(bytes);
                sha1_hex(&blob)
            }
            None => sha1_hex(format!("tree {path}").as_bytes()),
        };
        let mut value = json!({
            "type": "file",
            "name": name,
            "path": path,
            "sha": sha,
            "size": content.map_or(0, Vec::len),
            "url": format!("{}/repos/{repo}/contents/{path}?ref={git_ref}", self.base),
            "html_url": format!("https://github.com/{repo}/blob/{git_ref}/{path}"),
            "git_url": format!("{}/repos/{repo}/git/blobs/{sha}", self.base),
            "download_url": format!("https://raw.githubusercontent.com/{repo}/{git_ref}/{path}"),
        });
        if let Some(bytes) = content {
            value["encoding"] = Value::from("base64");
            value["content"] = Value::from(wrapped_base64(bytes));
        }
        value
    }
}

/// Checks one inline review comment against the pull request's files: its
/// path must be one of them, and its line (on the `side` given, RIGHT by
/// default) must be in the diff.
pub(super) fn check_review_comment(comment: &Value, files: &[PullFile]) -> Result<(), Reply> {
    let path = comment["path"].as_str().unwrap_or("");
    let Some(file) = files.iter().find(|file| file.path == path) else {
        return Err(Reply::invalid(
            "PullRequestReviewComment",
            "path",
            "invalid",
        ));
    };
    if comment["body"].as_str().is_none_or(str::is_empty) {
        return Err(Reply::invalid(
            "PullRequestReviewComment",
            "body",
            "missing_field",
        ));
    }
    if comment.get("position").is_some_and(Value::is_u64) {
        return Ok(());
    }
    let Some(line) = comment["line"].as_u64() else {
        return Err(Reply::invalid(
            "PullRequestReviewComment",
            "line",
            "missing_field",
        ));
    };
    let left = comment["side"].as_str() == Some("LEFT");
    if !diff_lines(&file.patch, left).contains(&line) {
        return Err(Reply::invalid_custom(
            "PullRequestReviewComment",
            "line",
            "could not be resolved",
        ));
    }
    Ok(())
}
