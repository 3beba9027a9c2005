// A stand-in for the `vscode` module (VS Code itself cannot be downloaded here): just the API
// surface that vscode-languageclient and the extension touch, so that the REAL LanguageClient
// drives the REAL server under `node --test`. Tests reach the recorded state through `__test`.
'use strict';
const path = require('path');

class Disposable {
  constructor(fn) { this._fn = fn; }
  static from(...items) { return new Disposable(() => items.forEach((d) => d && d.dispose())); }
  dispose() { if (this._fn) { this._fn(); this._fn = undefined; } }
}

class EventEmitter {
  constructor() { this._listeners = new Set(); }
  get event() {
    return (listener, thisArg, disposables) => {
      const bound = listener.bind(thisArg);
      this._listeners.add(bound);
      const d = new Disposable(() => this._listeners.delete(bound));
      if (Array.isArray(disposables)) disposables.push(d);
      return d;
    };
  }
  fire(value) { for (const l of [...this._listeners]) l(value); }
  dispose() { this._listeners.clear(); }
}

class CancellationTokenSource {
  constructor() {
    this._emitter = new EventEmitter();
    const self = this;
    this.token = { isCancellationRequested: false, onCancellationRequested: this._emitter.event };
    this.cancel = () => { if (!self.token.isCancellationRequested) { self.token.isCancellationRequested = true; self._emitter.fire(); } };
  }
  dispose() { this._emitter.dispose(); }
}

class Position {
  constructor(line, character) { this.line = line; this.character = character; }
}

class Range {
  constructor(a, b, c, d) {
    if (typeof a === 'number') { this.start = new Position(a, b); this.end = new Position(c, d); }
    else { this.start = a; this.end = b; }
  }
}

class Selection extends Range {
  constructor(anchor, active) { super(anchor, active); this.anchor = anchor; this.active = active; }
}

class ThemeColor { constructor(id) { this.id = id; } }

class Uri {
  constructor(scheme, fsPath) { this.scheme = scheme; this.fsPath = fsPath; this.path = fsPath; }
  static file(p) { return new Uri('file', path.resolve(p)); }
  static parse(s) { const m = /^([a-z]+):\/\/(.*)$/.exec(s); return m ? new Uri(m[1], decodeURIComponent(m[2])) : new Uri('file', s); }
  toString() { return `${this.scheme}://${encodeURI(this.fsPath)}`; }
  toJSON() { return this.toString(); }
}

/** A text document whose text the test sets; offsets follow VS Code's (UTF-16, \n line ends). */
class TextDocument {
  constructor(uri, languageId, text) { this.uri = uri; this.languageId = languageId; this.version = 1; this._text = text; this.isClosed = false; this.eol = 1; }
  get fileName() { return this.uri.fsPath; }
  get lineCount() { return this._text.split('\n').length; }
  getText() { return this._text; }
  lineAt(line) { const text = this._text.split('\n')[line]; return { text, lineNumber: line }; }
  offsetAt(pos) { const lines = this._text.split('\n'); let o = 0; for (let i = 0; i < pos.line; i++) o += lines[i].length + 1; return o + pos.character; }
  positionAt(offset) { const before = this._text.slice(0, offset).split('\n'); return new Position(before.length - 1, before[before.length - 1].length); }
}

class InlineCompletionItem { constructor(insertText, range, command) { this.insertText = insertText; this.range = range; this.command = command; } }
class InlineCompletionList { constructor(items) { this.items = items; } }
class SnippetString { constructor(value) { this.value = value; } }
class MarkdownString { constructor(value) { this.value = value || ''; } }
class CancellationError extends Error {}
// Base classes the client's protocol converters extend when it is loaded.
class CompletionItem { constructor(label, kind) { this.label = label; this.kind = kind; } }
class CompletionList { constructor(items, isIncomplete) { this.items = items || []; this.isIncomplete = !!isIncomplete; } }
class CallHierarchyItem {}
class CodeAction {}
class CodeLens {}
class Diagnostic {}
class DocumentLink {}
class InlayHint {}
class SymbolInformation {}
class TypeHierarchyItem {}

// What package.json contributes: each setting's default, as VS Code reads it.
const CONTRIBUTED = require(path.join(__dirname, '..', '..', '..', 'package.json')).contributes.configuration.properties;
const LEVELS = ['globalValue', 'workspaceValue', 'workspaceFolderValue'];  // the narrowest set one wins

const state = {
  // The user's settings by level, e.g. config.globalValue['draftline.maxTokens'] = 24.
  config: Object.fromEntries(LEVELS.map((level) => [level, {}])),
  commands: new Map(),
  inlineProviders: [],
  completionProviders: [],
  statusBarItems: [],
  messages: [],
  output: [],
  // Decorations drawn, by decoration type key: the last ranges (or options) set.
  decorations: new Map(),
  context: {},  // setContext keys
};

const VIEW_LINES = 20;  // an editor shows this many lines from its top line

const onDidChangeConfiguration = new EventEmitter();
const onDidOpenTextDocument = new EventEmitter();
const onDidCloseTextDocument = new EventEmitter();
const onDidChangeTextDocument = new EventEmitter();
const onDidChangeTextEditorSelection = new EventEmitter();
const noEvent = new EventEmitter().event;

const workspace = {
  workspaceFolders: [],
  textDocuments: [],
  notebookDocuments: [],
  getConfiguration(section) {
    const prefix = section ? `${section}.` : '';
    const inspect = (key) => {
      const name = `${prefix}${key}`;
      if (!(name in CONTRIBUTED)) return undefined;
      return { key: name, defaultValue: CONTRIBUTED[name].default,
        ...Object.fromEntries(LEVELS.map((level) => [level, state.config[level][name]])) };
    };
    const get = (key, dflt) => {
      const i = inspect(key);
      const value = i && [...LEVELS].reverse().map((level) => i[level]).find((v) => v !== undefined);
      return value !== undefined ? value : i?.defaultValue !== undefined ? i.defaultValue : dflt;
    };
    return { get, inspect, has: (key) => inspect(key) !== undefined,
      update: async (key, value) => __test.setConfig({ [`${prefix}${key}`]: value }) };
  },
  getWorkspaceFolder: () => undefined,
  onDidChangeConfiguration: onDidChangeConfiguration.event,
  onDidOpenTextDocument: onDidOpenTextDocument.event,
  onDidCloseTextDocument: onDidCloseTextDocument.event,
  onDidChangeTextDocument: onDidChangeTextDocument.event,
  onDidSaveTextDocument: noEvent,
  onWillSaveTextDocument: noEvent,
  onDidChangeWorkspaceFolders: noEvent,
  onDidOpenNotebookDocument: noEvent,
  onDidCloseNotebookDocument: noEvent,
  onDidChangeNotebookDocument: noEvent,
  onDidSaveNotebookDocument: noEvent,
};

function outputChannel(name) {
  const log = (level) => (msg) => state.output.push(`[${name} ${level}] ${msg}`);
  return { name, append: log('append'), appendLine: log('line'), replace: log('replace'), clear() {}, show() {}, hide() {}, dispose() {},
    trace: log('trace'), debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error'), logLevel: 2, onDidChangeLogLevel: noEvent };
}

const message = (kind) => async (text) => { state.messages.push({ kind, text }); return undefined; };
const window = {
  activeTextEditor: undefined,
  visibleTextEditors: [],
  onDidChangeVisibleTextEditors: noEvent,
  onDidChangeActiveTextEditor: noEvent,
  onDidChangeTextEditorSelection: onDidChangeTextEditorSelection.event,
  createOutputChannel: outputChannel,
  createStatusBarItem(alignment, priority) {
    const item = { alignment, priority, text: '', tooltips: [], command: undefined, visible: false, show() { this.visible = true; }, hide() { this.visible = false; }, dispose() {},
      get tooltip() { return this.tooltips.at(-1) ?? ''; }, set tooltip(t) { this.tooltips.push(t); } };  // every tooltip it showed
    state.statusBarItems.push(item);
    return item;
  },
  createTextEditorDecorationType(options) {
    const key = `decoration${state.decorations.size}`;
    state.decorations.set(key, []);
    return { key, options, dispose() {} };
  },
  showInformationMessage: message('info'),
  showWarningMessage: message('warning'),
  showErrorMessage: message('error'),
};

function matches(selector, doc) {
  const filters = Array.isArray(selector) ? selector : [selector];
  return filters.some((f) => (typeof f === 'string' ? f === doc.languageId
    : (!f.language || f.language === doc.languageId) && (!f.scheme || f.scheme === doc.uri.scheme)));
}

const languages = {
  match: (selector, doc) => (matches(selector, doc) ? 10 : 0),
  registerInlineCompletionItemProvider(selector, provider) {
    const entry = { selector, provider };
    state.inlineProviders.push(entry);
    return new Disposable(() => state.inlineProviders.splice(state.inlineProviders.indexOf(entry), 1));
  },
  registerCompletionItemProvider(selector, provider, ...triggers) {
    const entry = { selector, provider, triggers };
    state.completionProviders.push(entry);
    return new Disposable(() => state.completionProviders.splice(state.completionProviders.indexOf(entry), 1));
  },
  createDiagnosticCollection: () => ({ set() {}, delete() {}, clear() {}, dispose() {} }),
};

const commands = {
  registerCommand(id, fn) {
    if (state.commands.has(id)) throw new Error(`command '${id}' already exists`);
    state.commands.set(id, fn);
    return new Disposable(() => state.commands.delete(id));
  },
  async executeCommand(id, ...args) {
    if (id === 'setContext') { state.context[args[0]] = args[1]; return undefined; }
    const fn = state.commands.get(id);
    if (!fn) throw new Error(`command '${id}' not found`);
    return fn(...args);
  },
};

function view(line) {
  const top = Math.max(0, line - 5);
  return [new Range(top, 0, top + VIEW_LINES - 1, 0)];
}

/** Test-side controls: open documents, change settings, find what was registered. */
const __test = {
  state,
  openDocument(fsPath, languageId, text) {
    const doc = new TextDocument(Uri.file(fsPath), languageId, text);
    workspace.textDocuments.push(doc);
    onDidOpenTextDocument.fire(doc);
    return doc;
  },
  /** Set (or, with `undefined`, unset) settings at one level, as the Settings editor does. */
  async setConfig(values, level = 'globalValue') {
    for (const [name, value] of Object.entries(values)) {
      if (value === undefined) delete state.config[level][name];
      else state.config[level][name] = value;
    }
    const keys = Object.keys(values);
    onDidChangeConfiguration.fire({ affectsConfiguration: (s) => keys.some((k) => k === s || k.startsWith(`${s}.`)) });
  },
  /** The user puts the cursor at `position` of `doc`'s editor, which becomes the active one,
   * scrolled to show VIEW_LINES lines from a few above the cursor. */
  moveCursor(doc, position) {
    const editor = { document: doc, selection: new Selection(position, position), selections: [],
      visibleRanges: [],
      setDecorations(type, ranges) { state.decorations.set(type.key, ranges); },
      revealRange(range) { this.visibleRanges = view(range.start.line); },
      async edit(build) { build({ replace: (range, text) => __test.change(doc, range, text) }); return true; } };
    editor.visibleRanges = view(position.line);
    window.activeTextEditor = editor;
    onDidChangeTextEditorSelection.fire({ textEditor: editor, selections: [editor.selection], kind: 2 });
    return editor;
  },
  /** `range` of `doc` replaced by `text`, as typing or an editor's edit does. */
  change(doc, range, text) {
    const start = doc.offsetAt(range.start), end = doc.offsetAt(range.end);
    doc._text = doc._text.slice(0, start) + text + doc._text.slice(end);
    doc.version += 1;
    onDidChangeTextDocument.fire({ document: doc, reason: undefined,
      contentChanges: [{ range, rangeOffset: start, rangeLength: end - start, text }] });
  },
  inlineProviderFor(doc) { return state.inlineProviders.find((e) => matches(e.selector, doc))?.provider; },
};

module.exports = {
  version: '1.91.0',
  env: { appName: 'stand-in vscode', language: 'en', machineId: 'test', sessionId: 'test', openExternal: async () => false },
  Disposable, EventEmitter, CancellationTokenSource, CancellationError, Position, Range, Selection, ThemeColor, Uri,
  SnippetString, MarkdownString, TextEditorRevealType: { Default: 0, InCenter: 1, InCenterIfOutsideViewport: 2, AtTop: 3 },
  InlineCompletionItem, InlineCompletionList, CompletionItem, CompletionList,
  CallHierarchyItem, CodeAction, CodeLens, Diagnostic, DocumentLink, InlayHint, SymbolInformation, TypeHierarchyItem,
  InlineCompletionTriggerKind: { Invoke: 0, Automatic: 1 },
  CompletionItemKind: { Text: 0 }, CompletionTriggerKind: { Invoke: 0, TriggerCharacter: 1, TriggerForIncompleteCompletions: 2 },
  StatusBarAlignment: { Left: 1, Right: 2 },
  // Read while the client's protocol converter is built.
  CodeActionKind: Object.fromEntries(['Empty', 'QuickFix', 'Refactor', 'RefactorExtract', 'RefactorInline', 'RefactorRewrite',
    'Source', 'SourceOrganizeImports', 'SourceFixAll', 'Notebook'].map((k) => [k, k])),
  LogLevel: { Off: 0, Trace: 1, Debug: 2, Info: 3, Warning: 4, Error: 5 },
  workspace, window, languages, commands,
  __test,
};
