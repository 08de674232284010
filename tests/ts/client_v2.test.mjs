// The official TypeScript client v2 (`@modelcontextprotocol/client`) against `codespace serve` in
// both modes that reach MCP 2026-07-28 (`auto`: probes `server/discover`; pinned to 2026-07-28),
// over stdio and streamable HTTP, calling every tool the server lists; a `legacy` client on the
// same HTTP endpoint keeps its 2025-11-25 session. Issue 30.
//
// The binary comes from $CODESPACE_BIN (default: <repo>/target/debug/codespace).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = process.env.CODESPACE_BIN || join(REPO, 'target', 'debug', 'codespace');
const MODERN = '2026-07-28';
const WS = 'w';
const PATCH = (m) => `*** Begin Patch\n*** Add File: added-${m}.txt\n+added by ${m}\n*** End Patch\n`;

function setup() {
  const tmp = mkdtempSync(join(tmpdir(), 'codespace-ts-'));
  const root = join(tmp, 'ws');
  mkdirSync(join(root, 'src'), { recursive: true });
  writeFileSync(join(root, 'a.txt'), 'hello\n');
  writeFileSync(join(root, 'src', 'main.rs'), 'fn main() { println!("needle"); }\n');
  const cfg = join(tmp, 'config.json');
  writeFileSync(cfg, JSON.stringify({ workspaces: { [WS]: { root, profile: 'workspace-write' } } }));
  return { tmp, args: ['serve', '--config', cfg, '--store', join(tmp, 'store.db')] };
}

/** `codespace serve --http 127.0.0.1:0`; resolves with its URL once it says where it listens. */
function httpServer(args) {
  const proc = spawn(BIN, [...args, '--http', '127.0.0.1:0'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, CODESPACE_LOG: 'warn' },
  });
  return new Promise((ok, fail) => {
    let seen = '';
    proc.stderr.on('data', (d) => {
      seen += d;
      const m = seen.match(/http:\/\/127\.0\.0\.1:\d+\/mcp/);
      if (m) ok({ url: m[0], stop: () => new Promise((done) => { proc.once('exit', done); proc.kill('SIGTERM'); }) });
    });
    proc.once('exit', (code) => fail(new Error(`server exited (${code}) before listening: ${seen}`)));
  });
}

async function call(client, name, args) {
  const r = await client.callTool({ name, arguments: args });
  assert.ok(r.structuredContent, `${name}: no structured content`);
  return r;
}

async function ok(client, name, args) {
  const r = await call(client, name, args);
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)} failed: ${JSON.stringify(r.structuredContent)}`);
  return r.structuredContent;
}

async function errCode(client, name, args) {
  const r = await call(client, name, args);
  assert.ok(r.isError, `${name}: expected a tool error, got ${JSON.stringify(r.structuredContent)}`);
  return r.structuredContent;
}

async function everyTool(client, mode) {
  assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
  assert.equal(client.getProtocolEra(), 'modern');
  const listed = new Set((await client.listTools()).tools.map((t) => t.name));
  const called = new Set();
  const okc = (n, a) => { called.add(n); return ok(client, n, a); };
  const errc = async (n, a) => { called.add(n); return (await errCode(client, n, a)).code; };

  const info = await okc('workspace_info', { workspace_id: WS });
  assert.deepEqual(new Set(info.tools_exposed), listed);
  assert.equal((await okc('read', { workspace_id: WS, path: 'a.txt' })).content, 'hello\n');
  assert.ok((await okc('find', { workspace_id: WS })).paths.includes('a.txt'));
  assert.ok((await okc('grep', { workspace_id: WS, pattern: 'needle' })).matches.length > 0);
  assert.ok((await okc('find_files', { workspace_id: WS, query: 'main' })).matches.length > 0);
  const patched = await okc('apply_patch', { workspace_id: WS, patch: PATCH(mode) });
  assert.equal(patched.status, 'applied');
  assert.equal((await okc('operation_status', { operation_id: patched.operation_id })).status, 'applied');
  // The operation ledger (issue 31): the patch's diff, then its revert (a new apply_patch).
  assert.ok((await okc('operation_diff', { operation_id: patched.operation_id })).files.length > 0);
  assert.equal((await okc('operation_revert', { operation_id: patched.operation_id })).status, 'applied');
  // A whole-file write with exact bytes (no final newline), then its undo.
  const wrote = await okc('write_file', { workspace_id: WS, path: `written-${mode}.txt`, content: 'no newline', mode: 'create' });
  assert.equal(wrote.status, 'applied');
  assert.equal((await ok(client, 'operation_revert', { operation_id: wrote.operation_id })).status, 'applied');
  // A misspelt optional argument is named, not ignored.
  const bad = await errCode(client, 'read', { workspace_id: WS, path: 'a.txt', ofset: 1 });
  assert.equal(bad.code, 'INVALID_ARGUMENTS');
  assert.match(bad.message, /ofset/);

  const pid = (await okc('exec_command', { workspace_id: WS, command: ['cat'] })).process_id;
  assert.equal((await okc('write_stdin', { process_id: pid, data: 'echo\n' })).ok, true);
  await okc('read_process', { process_id: pid, wait_ms: 100 });
  assert.equal(await errc('process_resize', { process_id: pid, rows: 5, cols: 5 }), 'PROCESS_NOT_TTY');
  assert.equal((await okc('process_status', { process_id: pid })).process_id, pid);
  await okc('terminate_process', { process_id: pid });
  const own = await okc('process_list', { workspace_id: WS });
  assert.ok(own.processes.some((p) => p.process_id === pid));

  // The approval tools: a hold nobody created is not found (or not this client's to see).
  const absent = ['APPROVAL_NOT_FOUND', 'UNAUTHORIZED', 'INVALID_ARGUMENTS'];
  assert.ok(absent.includes(await errc('approval_resolve', { approval_id: 'appr-none', decision: 'grant' })));
  assert.ok(absent.includes(await errc('operation_resume', { approval_id: 'appr-none' })));
  called.add('approval_create');
  await call(client, 'approval_create', { tool: 'apply_patch', arguments: { workspace_id: WS, patch: PATCH('held') } });
  assert.deepEqual([...listed].filter((n) => !called.has(n)), [], 'tools not called');
}

for (const [label, mode] of [['auto', 'auto'], ['pinned', { pin: MODERN }]]) {
  test(`every tool over stdio, ${label}`, async () => {
    const { tmp, args } = setup();
    const transport = new StdioClientTransport({ command: BIN, args, cwd: tmp, env: { ...process.env, CODESPACE_LOG: 'warn' } });
    const client = new Client({ name: 'codespace-ts-test', version: '1' }, { versionNegotiation: { mode } });
    await client.connect(transport);
    try {
      await everyTool(client, `stdio-${label}`);
    } finally {
      await client.close();
    }
  });

  test(`every tool over HTTP, ${label}`, async () => {
    const { args } = setup();
    const server = await httpServer(args);
    try {
      const client = new Client({ name: 'codespace-ts-test', version: '1' }, { versionNegotiation: { mode } });
      await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
      try {
        await everyTool(client, `http-${label}`);
      } finally {
        await client.close();
      }
    } finally {
      await server.stop();
    }
  });
}

test('a legacy client keeps the 2025-11-25 session', async () => {
  const { args } = setup();
  const server = await httpServer(args);
  try {
    const client = new Client({ name: 'codespace-ts-test', version: '1' }, { versionNegotiation: { mode: 'legacy' } });
    await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
    try {
      assert.equal(client.getNegotiatedProtocolVersion(), '2025-11-25');
      assert.equal((await ok(client, 'read', { workspace_id: WS, path: 'a.txt' })).content, 'hello\n');
    } finally {
      await client.close();
    }
  } finally {
    await server.stop();
  }
});
