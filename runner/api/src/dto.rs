//! The plain data every [`crate::Runner`] method takes and returns: serde structs of strings,
//! numbers and lists. Paths are workspace-relative, `'/'`-separated strings (`"."` is the root);
//! a workspace is named by its id (the runner knows its root). Byte fields are `serde_bytes`:
//! one byte string in a binary format (the worker wire's MessagePack), a list of numbers in JSON.

use serde::{Deserialize, Serialize};

/// `read`: a window of a regular file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRequest {
    /// The workspace id.
    pub workspace: String,
    /// The file.
    pub path: String,
    /// First byte of the window.
    pub offset: u64,
    /// Most bytes of the window.
    pub limit: u64,
    /// Largest file whose version is computed (a larger one is `TooLarge`).
    pub max_hash_bytes: u64,
}

/// A window of a file and facts about the whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileWindow {
    /// The bytes of the window.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// Size of the whole file.
    pub size: u64,
    /// Content version of the whole file (`sha256:<hex>`).
    pub version: String,
    /// Hard-link count of the file that was read (from the open descriptor).
    pub links: u64,
}

/// The version of a path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRequest {
    /// The workspace id.
    pub workspace: String,
    /// The path.
    pub path: String,
    /// Largest file whose version is computed (a larger one is `TooLarge`).
    pub max_hash_bytes: u64,
}

/// A path of a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRequest {
    /// The workspace id.
    pub workspace: String,
    /// The path.
    pub path: String,
}

/// What a path is; a symlink is reported as such, never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// lstat-style facts of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    /// What it is.
    pub kind: FileKind,
    /// Permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Hard-link count.
    pub links: u64,
    /// Last modification time, milliseconds since the Unix epoch.
    #[serde(default)]
    pub mtime_ms: i64,
    /// Inode number.
    #[serde(default)]
    pub ino: u64,
}

/// A bounded listing beneath a directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalkRequest {
    /// The workspace id.
    pub workspace: String,
    /// The directory (`"."`: the root).
    pub path: String,
    /// Deepest path listed, in components below the root.
    pub max_depth: u64,
    /// Most entries listed.
    pub max_entries: u64,
    /// Report every non-directory's link count.
    pub stat_links: bool,
}

/// One listed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedEntry {
    /// Workspace-relative path.
    pub path: String,
    /// What it is.
    pub kind: FileKind,
    /// Inode number from the directory entry.
    pub ino: u64,
    /// Link count, when asked for (non-directories only).
    pub links: Option<u64>,
    /// A regular file named as a temporary file of a server instance the runner's store knows
    /// (`.codespace-tmp-<instance>-<n>`): the listing tools leave it out, secret masks do not.
    #[serde(default)]
    pub temp: bool,
}

/// Why a directory's content is not (wholly) in a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnlistedReason {
    /// It lies at the depth cap.
    Depth,
    /// It could not be read.
    Unreadable,
    /// It holds a name that is not UTF-8.
    NonUtf8Name,
}

/// A directory whose subtree a listing does not hold whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnlistedDir {
    /// The directory.
    pub path: String,
    /// Why.
    pub why: UnlistedReason,
    /// For a non-UTF-8 name: the first such name, escaped.
    pub name: Option<String>,
}

/// The result of a walk.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Listing {
    /// Every entry, sorted by path in byte order (the server's temp files marked `temp`).
    pub entries: Vec<ListedEntry>,
    /// A cap cut the walk short, or a directory could not be read.
    pub incomplete: bool,
    /// The entry cap cut the walk short.
    pub capped: bool,
    /// Entries left out for a non-UTF-8 name.
    pub non_utf8_skipped: u64,
    /// Directories whose content is not wholly listed.
    pub unlisted: Vec<UnlistedDir>,
}

/// A content search over given files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepRequest {
    /// The workspace id.
    pub workspace: String,
    /// The files, in the order results are reported.
    pub files: Vec<String>,
    /// The pattern.
    pub pattern: String,
    /// A regular expression (else a literal).
    pub regex: bool,
    /// Case-insensitive.
    pub case_insensitive: bool,
    /// Context lines before and after each match.
    pub context_lines: u64,
    /// Matches to skip.
    pub offset: u64,
    /// Most matches returned.
    pub max_matches: u64,
    /// Larger files are skipped.
    pub max_file_bytes: u64,
    /// Each line is cut to this many characters.
    pub max_line_chars: u64,
    /// Bytes of line text one page may carry.
    pub max_output_bytes: u64,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepMatch {
    /// Index of the file in the request's list.
    pub file: u64,
    /// 1-based line number.
    pub line_number: u64,
    /// The line (lossy UTF-8, capped).
    pub line: String,
    /// The line was cut.
    pub line_truncated: bool,
    /// Context before.
    pub before: Vec<String>,
    /// Context after.
    pub after: Vec<String>,
}

/// One page of a content search.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GrepPage {
    /// Matches, in file then line order.
    pub matches: Vec<GrepMatch>,
    /// `(file index, matches in that file)` for each file with a match on this page.
    pub file_counts: Vec<(u64, u64)>,
    /// Binary files skipped.
    pub skipped_binary: u64,
    /// Files over the size cap skipped.
    pub skipped_too_large: u64,
    /// Files that could not be read.
    pub skipped_unreadable: u64,
    /// More matches follow.
    pub truncated: bool,
    /// Where the next page starts.
    pub next_offset: Option<u64>,
    /// Files this page accounts for (a prefix of the list).
    pub files_examined: u64,
}

/// One change of a planned patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FileChange {
    /// Create or replace a file.
    Write {
        /// The file.
        path: String,
        /// Its new content.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        /// Its permission bits.
        mode: u32,
    },
    /// Remove a regular file.
    Delete {
        /// The file.
        path: String,
    },
    /// Write `to` and remove `from`.
    Move {
        /// The source.
        from: String,
        /// The destination.
        to: String,
        /// The destination's content.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        /// The destination's permission bits.
        mode: u32,
    },
}

/// The state of one touched path before a patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// The path.
    pub path: String,
    /// Content and permission bits before; `None` when it did not exist.
    #[serde(with = "bytes_and_mode")]
    pub before: Option<(Vec<u8>, u32)>,
}

/// Which paths a patch will touch, to snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRequest {
    /// The workspace id.
    pub workspace: String,
    /// The planned changes.
    pub changes: Vec<FileChange>,
}

/// Apply a planned patch whose journal the gateway recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyRequest {
    /// The workspace id.
    pub workspace: String,
    /// The planned changes.
    pub changes: Vec<FileChange>,
    /// The snapshot the gateway journaled.
    pub journaled: Vec<Backup>,
}

/// Versions of one touched path around a patch (`None`: absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileVersions {
    /// The path.
    pub path: String,
    /// Before.
    pub before: Option<String>,
    /// After.
    pub after: Option<String>,
}

/// What an applied patch did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedPatch {
    /// One entry per touched path, in order of first appearance.
    pub files: Vec<FileVersions>,
    /// Directories created, outermost first.
    pub created_dirs: Vec<String>,
}

/// Backups to restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRequest {
    /// The workspace id.
    pub workspace: String,
    /// The backups.
    pub backups: Vec<Backup>,
}

/// The network a sandboxed command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxNetwork {
    /// None at all.
    Restricted,
    /// Only the gateway's egress proxy: the command's namespace has only `lo`, where the
    /// sandbox's relay listens and hands every connection to the proxy over the control socket
    /// named by [`SandboxSpec::proxy_relay`]. Only a runner on the gateway's own host can be
    /// handed that socket; a remote runner refuses it (the engine fails closed before asking).
    Proxy,
    /// No network restriction.
    Enabled,
}

/// The sandbox a command runs in, as data (the gateway derived it from its decisions). Paths
/// here are absolute paths on the runner's side (the runner knows its workspace roots).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// The whole workspace is writable.
    pub write_workspace: bool,
    /// Writable candidates beneath read-only ones.
    pub write_paths: Vec<String>,
    /// Read-only binds over denied candidates.
    pub read_only: Vec<String>,
    /// Secret masks.
    pub masks: Vec<String>,
    /// The network.
    pub network: SandboxNetwork,
    /// The command's private temp directory.
    pub tmp_dir: Option<String>,
    /// Extra readable directories.
    pub extra_read: Vec<String>,
    /// The home directory it may read.
    pub home_dir: Option<String>,
    /// The runner makes the command a private temp directory (mode 0700, readable and writable
    /// in the sandbox, removed when the process exits or is evicted) and points each variable
    /// named here at it (`TMPDIR`, and `HOME` when no home directory is known).
    #[serde(default)]
    pub private_tmp: Option<Vec<String>>,
    /// Mask every top-level entry whose name is not UTF-8 (read in the command's namespace).
    #[serde(default)]
    pub mask_non_utf8_top_level: bool,
    /// [`SandboxNetwork::Proxy`]: the relay control socket the gateway registered with this
    /// runner for this command (an in-process handle; meaningless to any other runner).
    #[serde(default)]
    pub proxy_relay: Option<String>,
    /// A staged view (a `before_patch` hook): the runner writes these files into a private
    /// stage directory and the command sees them over the workspace, read-only, in its own mount
    /// namespace (no write scope may come with it). Removed when the process exits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<Vec<StagedFile>>,
}

/// One file of a staged view: its new content and mode, or `None` for a deleted path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedFile {
    /// Workspace-relative path.
    pub path: String,
    /// The new content (`None`: the patch deletes the path).
    #[serde(default)]
    pub data: Option<Vec<u8>>,
    /// The new file's mode.
    #[serde(default)]
    pub mode: u32,
}

/// A terminal size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TermSize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// Start a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnRequest {
    /// The workspace id.
    pub workspace: String,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Workspace-relative working directory.
    pub cwd: String,
    /// The whole environment of the child.
    pub env: Vec<(String, String)>,
    /// On a terminal of this size (else pipes).
    pub tty: Option<TermSize>,
    /// Kill after this many milliseconds.
    pub timeout_ms: Option<u64>,
    /// Stderr apart from stdout (pipes only).
    pub separate_stderr: bool,
    /// Who started it (the runner groups processes by it).
    pub owner: String,
    /// The sandbox, or none (the workspace's operator turned it off).
    pub sandbox: Option<SandboxSpec>,
}

/// A started process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnedProcess {
    /// The runner's id of it.
    pub process_id: String,
    /// Its pid on the runner's host.
    pub pid: u32,
}

/// A process by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRef {
    /// The runner's id of it.
    pub process_id: String,
}

/// Bytes for a process's stdin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StdinRequest {
    /// The process.
    pub process_id: String,
    /// The bytes.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// A new terminal size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeRequest {
    /// The process.
    pub process_id: String,
    /// The size.
    pub size: TermSize,
}

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// Stdout (with stderr, unless kept apart).
    Stdout,
    /// Stderr kept apart.
    Stderr,
}

/// Read a process's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRequest {
    /// The process.
    pub process_id: String,
    /// Which stream.
    pub stream: OutputStream,
    /// Byte cursor to read from.
    pub cursor: u64,
    /// Most bytes returned.
    pub max_bytes: Option<u64>,
    /// How long to wait for output (0: not at all).
    pub wait_ms: u64,
    /// The last `max_bytes` before the end of the output instead of from `cursor`.
    #[serde(default)]
    pub tail: bool,
}

/// A page of output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputPage {
    /// The bytes.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// Cursor after them.
    pub cursor: u64,
    /// No more output will come.
    pub eof: bool,
    /// Bytes before the requested cursor were dropped from the ring.
    pub output_lost: bool,
    /// Oldest cursor still held.
    pub retained_from: u64,
}

/// A process's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    /// Running.
    Running,
    /// Exited (or killed).
    Exited,
    /// Its worker died: nothing more is known of it.
    Lost,
}

/// A process's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStatus {
    /// The process.
    pub process_id: String,
    /// Its state.
    pub state: ProcessState,
    /// Exit code, once exited normally.
    pub exit_code: Option<i32>,
    /// Signal that ended it.
    pub signal: Option<i32>,
    /// Why it ended, as the runner names it (`exited`, `timeout`, `terminated`, ...).
    pub termination: Option<String>,
    /// It runs on a terminal.
    #[serde(default)]
    pub tty: bool,
    /// Bytes of output produced so far.
    #[serde(default)]
    pub output_total: u64,
    /// Oldest output cursor still held.
    #[serde(default)]
    pub output_retained_from: u64,
    /// Output collection has finished.
    #[serde(default)]
    pub eof: bool,
}

/// What the runner's kernel offers the command sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxProbe {
    /// Landlock ABI version, if any.
    pub landlock_abi: Option<u32>,
    /// seccomp filters.
    pub seccomp: bool,
    /// User namespaces.
    pub user_namespaces: bool,
    /// Network namespaces.
    pub net_namespaces: bool,
    /// Mount namespaces (secret masks).
    pub mount_namespaces: bool,
    /// The task limit of the runner's commands and how it is enforced there (`None`: not
    /// reported).
    #[serde(default)]
    pub pids: Option<PidsProbe>,
}

/// The task (process and thread) limit of each command a runner starts, as its host enforces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidsProbe {
    /// Most tasks of one command and its descendants.
    pub limit: u32,
    /// How the limit is enforced.
    pub mechanism: PidsEnforcement,
}

/// How a runner's host enforces a command's task limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PidsEnforcement {
    /// The cgroup v2 `pids` controller.
    CgroupV2,
    /// A cgroup v1 `pids` hierarchy.
    CgroupV1,
    /// Not enforced.
    None,
}

impl PidsEnforcement {
    /// The name `workspace_info.execution.isolation.pids.mechanism` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            PidsEnforcement::CgroupV2 => "cgroup-v2",
            PidsEnforcement::CgroupV1 => "cgroup-v1",
            PidsEnforcement::None => "none",
        }
    }
}

/// [`Backup::before`] with its content as one byte string (`serde_bytes`), not a sequence of
/// numbers.
mod bytes_and_mode {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<(Vec<u8>, u32)>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref()
            .map(|(data, mode)| (serde_bytes::Bytes::new(data), *mode))
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<(Vec<u8>, u32)>, D::Error> {
        let v = Option::<(serde_bytes::ByteBuf, u32)>::deserialize(d)?;
        Ok(v.map(|(data, mode)| (data.into_vec(), mode)))
    }
}
