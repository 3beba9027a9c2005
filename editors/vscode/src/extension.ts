// Entry point: starts the Draftline language server and wires the status bar and commands.
// `draftline.toggle` (and the accept notifications that inline items carry as their command)
// are the server's own executeCommand commands, which the LanguageClient registers in VS Code.
import * as vscode from 'vscode';
import { LanguageClient, State } from 'vscode-languageclient/node';
import { createClient, sendSettings, serverCommand } from './client';
import { ServerSettings, readLanguages, readServerSettings, serverPathFromSettings } from './settings';
import { NextEdits } from './nextEdit';
import { CursorRest } from './rest';
import { Stats, formatStats } from './stats';
import { ServerStatus, StatusBar } from './status';

/** Returned by activate(); lets other extensions (and the tests) reach the client. */
export interface DraftlineApi {
  client(): LanguageClient | undefined;
  status(): ServerStatus;
}

let client: LanguageClient | undefined;
let sent: ServerSettings = {}; // the settings the running server was given
let statusBar: StatusBar | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<DraftlineApi> {
  const bar = new StatusBar();
  statusBar = bar;
  context.subscriptions.push(
    bar,
    vscode.commands.registerCommand('draftline.showStats', showStats),
    vscode.workspace.onDidChangeConfiguration(onDidChangeConfiguration),
    new NextEdits(() => client),
    new CursorRest(() => client),
  );
  await startClient();
  return { client: () => client, status: () => bar.status };
}

export function deactivate(): Promise<void> | undefined {
  return stopClient();
}

async function startClient(): Promise<void> {
  sent = readServerSettings();
  const c = createClient(serverPathFromSettings(), readLanguages(), sent);
  client = c;
  c.onNotification('draftline/status', (s: ServerStatus) => statusBar?.update(s));
  c.onNotification('draftline/suggestionReady', askAgain);
  c.onDidChangeState((e) => {
    if (e.newState === State.Stopped && client === c) {
      statusBar?.update({ state: 'error', message: 'the server stopped; see the Draftline output' });
    }
  });
  try {
    await c.start();
  } catch (err) {
    statusBar?.update({ state: 'error', message: `cannot start the server: ${err instanceof Error ? err.message : err}` });
  }
}

// A request answered empty at the server's time budget has its suggestion now: ask again if the
// cursor is still where it was (the server then answers from its cache at once).
async function askAgain(ready: { uri: string; position: { line: number; character: number } }): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  const at = editor?.selection.active;
  if (editor && at && editor.document.uri.toString() === ready.uri && at.line === ready.position.line &&
      at.character === ready.position.character) {
    await vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
  }
}

async function stopClient(): Promise<void> {
  const c = client;
  client = undefined;
  if (c?.isRunning()) {
    await c.stop();
  }
}

async function onDidChangeConfiguration(e: vscode.ConfigurationChangeEvent): Promise<void> {
  if (!e.affectsConfiguration('draftline')) {
    return;
  }
  const settings = readServerSettings();
  // The executable and the document selector are fixed when a client starts. A setting the user
  // cleared goes back to the server's command line or default, which only a new server knows.
  const cleared = Object.keys(sent).some((key) => !(key in settings));
  if (e.affectsConfiguration('draftline.serverPath') || e.affectsConfiguration('draftline.languages') || cleared) {
    await stopClient();
    await startClient();
  } else if (client?.isRunning()) {
    sent = settings;
    await sendSettings(client, settings);
  }
}

async function showStats(): Promise<void> {
  if (!client?.isRunning()) {
    void vscode.window.showWarningMessage('Draftline: the server is not running.');
    return;
  }
  const stats = await serverCommand<Stats>(client, 'draftline.stats');
  void vscode.window.showInformationMessage(formatStats(stats));
}
