//! The `--help` texts that clap does not derive: the summary, the pointer to the docs and an
//! `Examples:` block for every subcommand (a unit test in `cli.rs` checks each has one).

/// Under the top-level usage.
pub const ABOUT: &str = "Execution-only MCP server with Cedar policy: serves MCP over stdio \
(default) or streamable HTTP (--http)";

/// After the top-level help.
pub const TOP: &str = "\
Examples:
  codespace serve ~/src/project                 # stdio, for a host that starts the server
  codespace serve ~/src/project --http          # streamable HTTP at http://127.0.0.1:8787/mcp
  codespace serve --config codespace.json       # several workspaces, profiles, clients
  codespace doctor --config codespace.json      # check a set-up before connecting a host
  codespace policy test --policies policies --coverage-min 100
  codespace audit --decision deny               # the newest decisions first

Documentation: README.md (install, connect a host) and docs/ (config.md: every config field;
operations.md: HTTP, tokens, proxies; policy.md: writing and testing policy; security.md)";

/// `serve`.
pub const SERVE: &str = "\
Examples:
  codespace serve                               # the current directory over stdio
  codespace serve ~/src/project --store /tmp/codespace.db
  codespace serve ~/src/project --http          # http://127.0.0.1:8787/mcp, loopback, no tokens
  codespace serve --config codespace.json --http 127.0.0.1:9000
  CODESPACE_LOG=info codespace serve ~/src/project
  codespace serve ~/src/project --toolchain /opt/go   # one more toolchain for the commands

Without a `path` in the config, the commands may read and run your toolchains (CARGO_HOME,
RUSTUP_HOME, and cargo, rustc, python3, node, go as found on this PATH), read-only;
--no-toolchains turns that off.

Over stdio the server reads JSON-RPC on stdin and writes only protocol messages to stdout; logs
go to stderr. Stop it with Ctrl-C (or Ctrl-D on a terminal). See docs/config.md and
docs/operations.md.";

/// `worker`.
pub const WORKER: &str = "\
Examples:
  codespace worker --stdio                      # what ssh, podman exec and kubectl exec start
  codespace worker --socket /run/codespace/w/worker.sock --allow-uid 1000

The gateway writes the per-start secret as the first line of stdin (never in argv). This build's
worker answers the protocol's handshake and ping; the runner is not served through it yet
(docs/environments.md).";

/// `environments`.
pub const ENVIRONMENTS: &str = "\
Examples:
  codespace environments install --config /etc/codespace/codespace.json --environment build-host

Containers the server starts mount this binary; named containers and pods take it from their
image (docs/environments.md).";

/// `environments install`.
pub const ENVIRONMENTS_INSTALL: &str = "\
Examples:
  codespace environments install --config /etc/codespace/codespace.json --environment build-host
  codespace environments install --config c.json --environment build-host --dir /opt/codespace/bin

Prints `installed` or `present` and the path to set as the environment's `ssh.worker_path`. The
copy goes through the environment's own ssh settings (known_hosts, key, options); it is checked
by SHA-256 after the upload and written under a temporary name first, mode 0700.";

/// `doctor`.
pub const DOCTOR: &str = "\
Examples:
  codespace doctor                              # what `codespace serve` would use here
  codespace doctor ~/src/project
  codespace doctor --config /etc/codespace/codespace.json
  codespace doctor --config codespace.json --json

Exit status: 0 when nothing is wrong, 1 with one line per problem on stderr.";

/// `config`.
pub const CONFIG: &str = "\
Examples:
  codespace config schema > codespace.schema.json

The reference of every field is docs/config.md.";

/// `config schema`.
pub const CONFIG_SCHEMA: &str = "\
Examples:
  codespace config schema > codespace.schema.json
  # then, in codespace.json:  \"$schema\": \"./codespace.schema.json\"";

/// `audit`.
pub const AUDIT: &str = "\
Examples:
  codespace audit                               # the newest 50 decisions, newest first
  codespace audit --decision deny --since 2h
  codespace audit --workspace app --tool exec_command --limit 200
  codespace audit --oldest --limit 10           # the first decisions ever logged
  codespace audit --json > decisions.jsonl      # every row, JSON lines for a SIEM
  codespace audit --events                      # start-ups and policy reloads
  codespace audit scrub --config codespace.json # re-redact stored rows with today's patterns";

/// `audit scrub`.
pub const AUDIT_SCRUB: &str = "\
Examples:
  codespace audit scrub --config codespace.json # the config's store and redaction patterns
  codespace audit scrub --store audit.db --json # built-in patterns; one JSON report
Safe while `serve` runs (short transactions); a second run changes nothing.
Held arguments of pending or granted holds are left as they are (a grant runs them).";

/// `policy`.
pub const POLICY: &str = "\
Examples:
  codespace policy init my-policies             # the shipped set as a start, outside a checkout
  codespace policy validate --policies policies
  codespace policy test --policies policies --coverage-min 100 --fail-on-empty
  codespace policy explain --call '{\"name\":\"read\",\"arguments\":{\"workspace_id\":\"w\",\"path\":\".env\"}}'

See docs/policy.md.";

/// `policy validate`.
pub const POLICY_VALIDATE: &str = "\
Examples:
  codespace policy validate                     # ./policies when it exists, else the shipped set
  codespace policy validate --policies policies --schema schema/codespace.cedarschema
  codespace policy validate --config codespace.json";

/// `policy test`.
pub const POLICY_TEST: &str = "\
Examples:
  codespace policy test --policies policies --coverage-min 100 --fail-on-empty
  codespace policy test --policies policies policies/tests/read-only.yaml
  codespace policy test --policies policies --format junit --output report.xml";

/// `policy explain`.
pub const POLICY_EXPLAIN: &str = "\
Examples:
  codespace policy explain --call '{\"name\":\"read\",\"arguments\":{\"workspace_id\":\"w\",\"path\":\".env\"}}'
  codespace policy explain --workspace-profile read-only \\
    --call '{\"name\":\"exec_command\",\"arguments\":{\"workspace_id\":\"w\",\"command\":[\"make\"]}}'
  codespace policy explain --config codespace.json --json \\
    --call '{\"name\":\"apply_patch\",\"arguments\":{\"workspace_id\":\"app\",\"patch\":\"...\"}}'
  codespace policy explain --transport http --client oidc:inspector --user carol --group contractors \\
    --call '{\"name\":\"exec_command\",\"arguments\":{\"workspace_id\":\"w\",\"command\":[\"make\"]}}'";

/// `policy diff`.
pub const POLICY_DIFF: &str = "\
Examples:
  codespace policy diff --config codespace.json --against candidate/policies --since 7d
  codespace policy diff --config codespace.json --shadow --tests --json
  # CI gate: exit 3 when the candidate would allow anything the live set denied
  codespace policy diff --policies policies --against pr/policies --tests";

/// `policy ls`.
pub const POLICY_LS: &str = "\
Examples:
  codespace policy ls --config codespace.json
  codespace policy ls --policies policies --json";

/// `policy unused`.
pub const POLICY_UNUSED: &str = "\
Examples:
  codespace policy unused --config codespace.json --since 7d
  codespace policy unused --policies policies --store /var/lib/codespace/codespace.db --json";

/// `policy verify`.
pub const POLICY_VERIFY: &str = "\
Examples:
  codespace policy verify --policies policies
  codespace policy verify --config codespace.json --properties verify.toml
  codespace policy verify --policies candidate/policies --implies policies

verify.toml: [[property]] tables, each with one of
  subset = { a = \"read-only\", b = \"workspace-write\" }
  never_writes = { profiles = [\"*\"], paths = [\"**/.git/**\"] }
  writes_only = { profile = \"ci-runner\", paths = [\"target/**\", \"src/**\"] }
and optionally name = \"...\" (docs/policy.md, \"Symbolic checks\").";

/// `policy init`.
pub const POLICY_INIT: &str = "\
Examples:
  codespace policy init my-policies             # the shipped policies, tests, examples, schema
  cd my-policies && codespace policy test --coverage-min 100

DIR must not exist or be empty; nothing is ever overwritten.";

/// `console`.
pub const CONSOLE: &str = "\
Examples:
  codespace console --config codespace.json     # http://127.0.0.1:8788/console, read-only
  codespace console --config codespace.json --listen 127.0.0.1:9000

Sign in with an operator's client token (`console.operators`); grants and denials need the
live console of `codespace serve --http`. See docs/console.md.";

/// `ops`.
pub const OPS: &str = "\
Examples:
  codespace ops journals                        # the patch journals kept in the default store
  codespace ops journals --discard --config codespace.json
  codespace ops list --limit 20                 # the newest operations (the operation ledger)
  codespace ops show op-…                       # one operation's files
  codespace ops diff op-…                       # its unified diff (withheld files named, never shown)

See docs/operations.md.";

/// `ops journals`.
pub const OPS_JOURNALS: &str = "\
Examples:
  codespace ops journals --store /var/lib/codespace/codespace.db
  codespace ops journals --discard              # those no running server owns; audited as events
  codespace ops journals --json";

/// `ops list`.
pub const OPS_LIST: &str = "\
Examples:
  codespace ops list --store /var/lib/codespace/codespace.db
  codespace ops list --workspace default --limit 20 --json";

/// `ops show`.
pub const OPS_SHOW: &str = "\
Examples:
  codespace ops show op-0b6c3f1e-2f4d-4c55-9a77-5d1c2e3f4a5b
  codespace ops show op-0b6c3f1e-2f4d-4c55-9a77-5d1c2e3f4a5b --json";

/// `ops diff`.
pub const OPS_DIFF: &str = "\
Examples:
  codespace ops diff op-0b6c3f1e-2f4d-4c55-9a77-5d1c2e3f4a5b
  codespace ops diff op-0b6c3f1e-2f4d-4c55-9a77-5d1c2e3f4a5b --store /var/lib/codespace/codespace.db";

/// `policy sign`.
pub const POLICY_SIGN: &str = "\
Examples:
  codespace policy sign --policies policies --key ~/.ssh/id_ed25519
  codespace policy validate --policies policies --allowed-signers /etc/codespace/allowed_signers";

/// `policy fmt`.
pub const POLICY_FMT: &str = "\
Examples:
  codespace policy fmt --policies policies --check
  codespace policy fmt --policies policies";

/// `approvals`.
pub const APPROVALS: &str = "\
Examples:
  codespace approvals list --config codespace.json           # holds waiting for an answer
  codespace approvals show appr-… --config codespace.json    # who asked; the patch or command line
  codespace approvals grant appr-… --config codespace.json   # decided by policy, channel `cli`
  codespace approvals deny appr-… --config codespace.json    # final; the held arguments are scrubbed

Works on the store while the server runs: the client's next operation_resume sees the answer.
See docs/policy.md (\"Approvals: confirm risky commands\") and docs/operations.md.";

/// `approvals list`.
pub const APPROVALS_LIST: &str = "\
Examples:
  codespace approvals list --config codespace.json          # pending and granted holds, newest first
  codespace approvals list --all --json --store /var/lib/codespace/codespace.db";

/// `approvals show`.
pub const APPROVALS_SHOW: &str = "\
Examples:
  codespace approvals show appr-… --config codespace.json   # who asked; the patch or whole command line, cwd, tty, env
  codespace approvals show appr-… --json                    # env values redacted, control characters escaped";

/// `approvals grant`.
pub const APPROVALS_GRANT: &str = "\
Examples:
  codespace approvals grant appr-… --config codespace.json  # as $USER, channel `cli`
  codespace approvals grant appr-… --as alice               # decided by policy (approval_resolve)";

/// `approvals deny`.
pub const APPROVALS_DENY: &str = "\
Examples:
  codespace approvals deny appr-… --config codespace.json   # final; the held arguments are scrubbed";
