// The REAL vscode-languageclient starts the REAL `lsp_server --stdio` (the small model) through
// the extension, with the stand-in `vscode` module (test/stubs, put on NODE_PATH by `npm test`).
// One server for the whole file: the model loads once.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const vscode = require('vscode');
const extension = require('../out/extension');

const REPO = path.resolve(__dirname, '..', '..', '..');
const fake = vscode.__test;
const READY_TIMEOUT_MS = 180_000;

let api;

async function waitFor(what, predicate, timeoutMs = READY_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}; server log:\n${fake.state.output.slice(-20).join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

const stats = () => api.client().sendRequest('workspace/executeCommand', { command: 'draftline.stats', arguments: [] });
async function waitForStats(what, predicate, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await stats();
    if (predicate(s)) return s;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const statusBarText = () => fake.state.statusBarItems[0].text;

async function inline(doc, position, token = new vscode.CancellationTokenSource().token) {
  const provider = fake.inlineProviderFor(doc);
  assert.ok(provider, 'the client registered an inline completion provider for the document');
  const context = { triggerKind: vscode.InlineCompletionTriggerKind.Automatic, selectedCompletionInfo: undefined };
  const result = await provider.provideInlineCompletionItems(doc, position, context, token);
  return Array.isArray(result) ? result : result?.items ?? [];
}

before(async () => {
  // The extension finds .venv/bin/lsp_server in the workspace folder, like it does for a user.
  vscode.workspace.workspaceFolders = [{ uri: vscode.Uri.file(REPO), name: 'draftline', index: 0 }];
  await fake.setConfig({
    'draftline.serverPath': process.env.DRAFTLINE_SERVER || '',
    'draftline.languages': ['python'],
    'draftline.model': 'smollm2-135m',  // the small model: this test is about the client
    'draftline.maxTokens': 24,
    // Generous: two shared CPU cores; speed is measured by the benchmark, not here.
    'draftline.timeBudgetMs': 10_000,
  });
  api = await extension.activate({ subscriptions: [] });
  await waitFor('the server to report ready', () => api.status().state === 'ready');
}, { timeout: READY_TIMEOUT_MS + 10_000 });

after(async () => {
  await extension.deactivate();
});

test('the status bar follows the server from loading to ready', () => {
  assert.equal(api.client().isRunning(), true);
  assert.match(statusBarText(), /\$\(check\) Draftline/);
});

test('an opened document gets an inline completion, the same text the server sends', async () => {
  const doc = fake.openDocument(path.join(REPO, 'scratch_vscode_test.py'), 'python',
    'def add(a, b):\n    """Return the sum of a and b."""\n    return ');
  const position = new vscode.Position(2, 11);
  const items = await inline(doc, position);
  assert.ok(items.length > 0, `at least one suggestion; server log:\n${fake.state.output.slice(-10).join('\n')}`);
  const item = items[0];
  const text = typeof item.insertText === 'string' ? item.insertText : item.insertText.value;
  assert.ok(text.trim().length > 0, `non-empty suggestion, got ${JSON.stringify(text)}`);
  assert.equal(item.range.start.line, 2);
  // Independent route: the raw LSP request, without the client's conversion.
  const raw = await api.client().sendRequest('textDocument/inlineCompletion', {
    textDocument: { uri: doc.uri.toString() }, position: { line: 2, character: 11 }, context: { triggerKind: 2 },
  });
  const rawItems = Array.isArray(raw) ? raw : raw.items;
  const rawText = typeof rawItems[0].insertText === 'string' ? rawItems[0].insertText : rawItems[0].insertText.value;
  assert.equal(text, rawText);

  // Accepting runs the item's command, which the server counts.
  assert.equal(item.command?.command, 'draftline.didAccept');
  const before = await stats();
  await vscode.commands.executeCommand(item.command.command, ...(item.command.arguments ?? []));
  const afterAccept = await stats();
  assert.equal(afterAccept.accepted, before.accepted + 1);
});

test('where the cursor rests on a new line, the server prefills the window there', async () => {
  const doc = fake.openDocument(path.join(REPO, 'scratch_vscode_rest.py'), 'python',
    'import math\n\n\ndef circle_area(radius):\n    return math.pi * radius ** 2\n\n\ndef square_area(side):\n    return side * side\n');
  for (const line of [4, 8]) {
    const before = await stats();
    fake.moveCursor(doc, new vscode.Position(line, 0));
    await waitForStats(`the window at line ${line} to be prefilled`, (s) => s.prefetched > before.prefetched);
  }
});

test('the completion-menu fallback never reaches the server (inline completion covers it)', async () => {
  const doc = fake.openDocument(path.join(REPO, 'scratch_vscode_menu.py'), 'python', 'import sys\n\nsys.')
  const menu = fake.state.completionProviders.find((e) => vscode.languages.match(e.selector, doc));
  assert.ok(menu, 'the client registered the server\'s completion provider');
  const before = await stats();
  const items = await menu.provider.provideCompletionItems(doc, new vscode.Position(2, 4),
    new vscode.CancellationTokenSource().token, { triggerKind: 0 });
  assert.deepEqual(items, []);
  assert.equal((await stats()).requests, before.requests);
});

test('a cancelled request resolves empty and the server counts the cancellation', async () => {
  // Long multi-line suggestions keep the server busy long enough to be cancelled mid-generation.
  await fake.setConfig({ 'draftline.maxTokens': 64, 'draftline.multiline': 'always', 'draftline.timeBudgetMs': 60_000 });
  const doc = fake.openDocument(path.join(REPO, 'scratch_vscode_cancel.py'), 'python',
    'class Inventory:\n    """A store\'s stock: items, prices and quantities."""\n\n    def __init__(self):\n        ');
  const before = await stats();
  const source = new vscode.CancellationTokenSource();
  const pending = inline(doc, new vscode.Position(4, 8), source.token);
  await waitForStats('the server to start on the request', (s) => s.requests > before.requests);
  source.cancel();
  assert.deepEqual(await pending, []);
  const now = await waitForStats('the server to count the cancellation', (s) => s.cancelled > before.cancelled);
  assert.ok(now.cancelled > before.cancelled);
  await fake.setConfig({ 'draftline.maxTokens': 24, 'draftline.multiline': 'auto', 'draftline.timeBudgetMs': 10_000 });
});

test('draftline.enabled reaches the server through didChangeConfiguration', async () => {
  const doc = fake.openDocument(path.join(REPO, 'scratch_vscode_settings.py'), 'python', 'import os\n\nprint(os.')
  await fake.setConfig({ 'draftline.enabled': false });
  await waitFor('the disabled status', () => api.status().state === 'disabled', 30_000);
  assert.match(statusBarText(), /off/);
  assert.deepEqual(await inline(doc, new vscode.Position(2, 9)), []);
  await fake.setConfig({ 'draftline.enabled': true });
  await waitFor('the ready status', () => api.status().state === 'ready', 30_000);
});

test('the toggle command is the server\'s, and showStats reports its counters', async () => {
  await vscode.commands.executeCommand('draftline.toggle');
  await waitFor('the disabled status', () => api.status().state === 'disabled', 30_000);
  await vscode.commands.executeCommand('draftline.toggle');
  await waitFor('the ready status', () => api.status().state === 'ready', 30_000);
  await vscode.commands.executeCommand('draftline.showStats');
  const shown = fake.state.messages.at(-1);
  assert.equal(shown.kind, 'info');
  const s = await stats();
  assert.match(shown.text, new RegExp(`${s.accepted} accepted`));
});

test('a next edit out of view is marked, the first Tab jumps to it, the next makes it and asks again', async () => {
  const lines = ['class Shape(object):', '    def __init__(self, name):', '        self.name = name', ''];
  for (let i = 0; i < 20; i++) lines.push(`def helper_${i}(value):`, `    return value + ${i}`, '');
  lines.push('class Circle(object):', '    def __init__(self, radius):', '        self.radius = radius');
  const doc = fake.openDocument(path.join(REPO, 'scratch_vscode_next_edit.py'), 'python', lines.join('\n'));
  const editor = fake.moveCursor(doc, new vscode.Position(0, 11));
  const c = api.client();
  const asked = []; // each next-edit request: when, for which version
  const send = c.sendRequest.bind(c);
  c.sendRequest = (method, params, ...rest) => {
    if (method === 'draftline/nextEdit') asked.push({ at: Date.now(), version: params.version });
    return send(method, params, ...rest);
  };
  try {
    fake.change(doc, new vscode.Range(0, 11, 0, 19), ''); // class Shape(object): -> class Shape:
    await waitFor('a next edit shown', () => fake.state.context['draftline.nextEditVisible'] === true, 120_000);
    const edit = await send('draftline/nextEdit', { textDocument: { uri: doc.uri.toString() },
      position: { line: 0, character: 11 }, version: doc.version });
    assert.ok(edit && edit.start.line > editor.visibleRanges[0].end.line, `an edit out of view: ${JSON.stringify(edit)}`);
    const drawn = [...fake.state.decorations.values()].flat();
    assert.ok(drawn.some((d) => (d.start ?? d.range.start).line === edit.start.line), 'decorated at its range');
    assert.ok(drawn.some((d) => d.range?.start.line === 0 && /next edit \(Tab\)/.test(d.renderOptions.after.contentText)),
      'a hint at the cursor\'s line');

    const before = doc.getText();
    assert.equal(await vscode.commands.executeCommand('draftline.acceptNextEdit'), true);
    assert.equal(editor.selection.active.line, edit.start.line, 'the first Tab jumps to the edit');
    assert.equal(doc.getText(), before, 'and leaves the text as it was');
    assert.equal(fake.state.context['draftline.nextEditVisible'], true, 'the edit is still shown there');

    assert.equal(await vscode.commands.executeCommand('draftline.acceptNextEdit'), true);
    const offset = (text, p) => text.split('\n').slice(0, p.line).reduce((n, l) => n + l.length + 1, 0) + p.character;
    const expected = before.slice(0, offset(before, edit.start)) + edit.text + before.slice(offset(before, edit.end));
    assert.equal(doc.getText(), expected, 'the next Tab makes it');
    const made = Date.now();
    await waitFor('the next edit asked for', () => asked.some((a) => a.version === doc.version), 5_000);
    assert.ok(asked.find((a) => a.version === doc.version).at - made < 300, 'at once, not after the 600 ms pause');
  } finally {
    c.sendRequest = send;
    await vscode.commands.executeCommand('draftline.dismissNextEdit');
  }
});
