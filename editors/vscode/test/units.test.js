// Helpers: server path resolution, which settings are sent (against the stand-in `vscode`),
// status bar text, stats text.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const vscode = require('vscode');
const { SERVER_KEYS, readServerSettings, resolveServerPath } = require('../out/settings');
const { statusText } = require('../out/status');
const { formatStats } = require('../out/stats');

test('the configured server path wins', () => {
  assert.equal(resolveServerPath('/opt/lsp_server', ['/w'], () => true), '/opt/lsp_server');
});

test('the first workspace folder with .venv/bin/lsp_server is used', () => {
  const want = path.join('/b', '.venv', 'bin', 'lsp_server');
  assert.equal(resolveServerPath('', ['/a', '/b', '/c'], (p) => p === want || p.startsWith('/c')), want);
});

test('without a virtual environment the server comes from PATH', () => {
  assert.equal(resolveServerPath('', ['/a'], () => false), 'lsp_server');
});

test('the server keys are the server settings package.json contributes', () => {
  const contributed = Object.keys(require('../package.json').contributes.configuration.properties)
    .map((k) => k.replace(/^draftline\./, '')).filter((k) => k !== 'serverPath' && k !== 'languages');
  assert.deepEqual([...SERVER_KEYS].sort(), contributed.sort());
});

test('only the settings the user set are sent; the narrowest level wins; null is a value', async () => {
  const { setConfig } = vscode.__test;
  assert.deepEqual(readServerSettings(), {}, 'nothing set, nothing sent (no defaults)');
  await setConfig({ 'draftline.maxTokens': 24, 'draftline.mode': 'ar', 'draftline.draft': 'embedded', 'draftline.languages': ['go'] });
  await setConfig({ 'draftline.mode': 'hybrid', 'draftline.draft': null }, 'workspaceValue');
  await setConfig({ 'draftline.mode': 'draft' }, 'workspaceFolderValue');
  assert.deepEqual(readServerSettings(), { maxTokens: 24, mode: 'draft', draft: null });
});

test('status text shows state, latency and acceptance', () => {
  assert.equal(statusText({ state: 'ready', lastLatencyMs: 83.6, acceptanceRate: 0.404 }), '$(check) Draftline 84 ms · 40%');
  assert.equal(statusText({ state: 'ready' }), '$(check) Draftline');
  assert.match(statusText({ state: 'loading', message: 'loading model' }), /loading/);
  assert.match(statusText({ state: 'error' }), /error/);
  assert.match(statusText({ state: 'disabled' }), /off/);
});

test('stats text names every counter', () => {
  const text = formatStats({ requests: 7, generated: 5, cancelled: 2, cacheHits: 1, accepted: 3, shown: 4,
    partiallyAccepted: 6, acceptedChars: 42, acceptanceRate: 0.75, p50Ms: 80, p95Ms: 210.4, lastLatencyMs: null, state: 'ready' });
  assert.equal(text, 'Draftline (ready): 7 requests, 5 generated, 3 accepted of 4 shown, 6 partly (42 chars), 2 cancelled, ' +
    '1 cache hits; draft tokens accepted 75%; latency p50 80 ms, p95 210 ms, last n/a');
});

test('a next edit ends where its text ends, and previews on one line', () => {
  const { endOf, previewText } = require('../out/nextEdit');
  assert.deepEqual(endOf({ line: 3, character: 4 }, 'w, h'), { line: 3, character: 8 });
  assert.deepEqual(endOf({ line: 3, character: 4 }, 'w,\n    h'), { line: 4, character: 5 });
  assert.equal(previewText('def f(w, h):\n    return w * h'), ' → def f(w, h): ⏎ return w * h');
});

test('an edit is out of view outside every visible range, and its hint points to it', () => {
  const { outOfView, hintText } = require('../out/nextEdit');
  const visible = [{ start: { line: 10 }, end: { line: 29 } }];
  assert.equal(outOfView(10, visible), false);
  assert.equal(outOfView(29, visible), false);
  assert.equal(outOfView(30, visible), true);
  assert.equal(outOfView(9, visible), true);
  assert.equal(outOfView(500, []), false, 'no view known: in view');
  assert.equal(hintText(12, 40), '  ↓ line 41: next edit (Tab)');
  assert.equal(hintText(12, 2), '  ↑ line 3: next edit (Tab)');
});
