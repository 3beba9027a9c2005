// Only the settings the user set reach the server; the rest come from its command line and its
// own defaults. The REAL LanguageClient starts the REAL server through a wrapper that adds
// `--model <a file that does not exist>`: a client that sent a `model` (e.g. a default
// "embedded") would override it and the server would load a model instead of failing.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const os = require('os');
const path = require('path');
const vscode = require('vscode');
const extension = require('../out/extension');

const REPO = path.resolve(__dirname, '..', '..', '..');
const SERVER = process.env.DRAFTLINE_SERVER || path.join(REPO, '.venv', 'bin', 'lsp_server');
const MISSING = '/nonexistent/draftline-model.gguf';
const fake = vscode.__test;

let api;
let wrapper;

async function waitFor(what, predicate, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}; status: ${JSON.stringify(api.status())}\n${fake.state.output.slice(-20).join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

const tooltips = () => fake.state.statusBarItems[0].tooltips;

before(async () => {
  wrapper = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'draftline-')), 'lsp_server');
  fs.writeFileSync(wrapper, `#!/bin/sh\nexec '${SERVER}' "$@" --model '${MISSING}'\n`, { mode: 0o755 });
  await fake.setConfig({ 'draftline.serverPath': wrapper, 'draftline.languages': ['python'], 'draftline.maxTokens': 24 });
  api = await extension.activate({ subscriptions: [] });
});

after(async () => {
  await extension.deactivate();
  fs.rmSync(path.dirname(wrapper), { recursive: true });
});

test('the server keeps the model its command line names', async () => {
  await waitFor('the server to load its model or fail', () => ['ready', 'error'].includes(api.status().state));
  assert.equal(api.status().state, 'error');
  assert.match(api.status().message, new RegExp(MISSING));
  assert.deepEqual(api.client().clientOptions.initializationOptions, { maxTokens: 24 });
});

test('a changed setting is sent alone: the server does not load another model', async () => {
  const seen = tooltips().length;
  await fake.setConfig({ 'draftline.maxTokens': 8 });
  // Then a model the user names: the server follows it, and nothing came before it.
  const other = '/nonexistent/other-model.gguf';
  await fake.setConfig({ 'draftline.model': other });
  await waitFor('the server to fail on the other model', () => api.status().state === 'error' && api.status().message.includes(other));
  const since = tooltips().slice(seen);
  assert.ok(since.every((t) => t.includes(other)), `statuses since the change: ${JSON.stringify(since)}`);
});

test('a setting the user clears goes back to the command line: a new server starts', async () => {
  const old = api.client();
  await fake.setConfig({ 'draftline.model': undefined });
  await waitFor('a new server that fails on the command line\'s model',
    () => api.client() !== old && api.status().state === 'error' && api.status().message.includes(MISSING));
  assert.deepEqual(api.client().clientOptions.initializationOptions, { maxTokens: 8 });
});
