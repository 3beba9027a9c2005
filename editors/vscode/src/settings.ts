// Reads the `draftline.*` settings and finds the server executable.
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';

/** The settings the server reads (lsp_server/options.py), each contributed as `draftline.<key>`. */
export const SERVER_KEYS = [
  'model', 'draft', 'mode', 'dtype', 'backend', 'maxTokens', 'multiline', 'timeBudgetMs', 'coldPrefillMs', 'windowTokens', 'debounceMs', 'repoContext', 'enabled',
  'endpoint', 'tokenizer', 'apiKeyEnv', 'allowInsecure', 'connectTimeoutS', 'readTimeoutS', 'nextEdit', 'editModel',
] as const;
export type ServerSettings = Partial<Record<(typeof SERVER_KEYS)[number], unknown>>;

/**
 * The server settings the user set (folder, workspace or user settings, the narrowest wins).
 * Unset ones are left out, so the server's command line and its own defaults decide them.
 */
export function readServerSettings(): ServerSettings {
  const c = vscode.workspace.getConfiguration('draftline');
  const set: ServerSettings = {};
  for (const key of SERVER_KEYS) {
    const i = c.inspect(key);
    // `null` is a value (e.g. no draft model); only `undefined` means "not set here".
    const value = [i?.workspaceFolderValue, i?.workspaceValue, i?.globalValue].find((v) => v !== undefined);
    if (value !== undefined) {
      set[key] = value;
    }
  }
  return set;
}

export function readLanguages(): string[] {
  return vscode.workspace.getConfiguration('draftline').get<string[]>('languages') ?? [];
}

/**
 * The configured path wins; otherwise the first workspace folder with the project's
 * virtual environment (`.venv/bin/lsp_server`); otherwise `lsp_server` on PATH.
 */
export function resolveServerPath(
  configured: string,
  folders: readonly string[],
  exists: (p: string) => boolean = fs.existsSync,
): string {
  if (configured) {
    return configured;
  }
  const bin = process.platform === 'win32' ? path.join('.venv', 'Scripts', 'lsp_server.exe') : path.join('.venv', 'bin', 'lsp_server');
  for (const folder of folders) {
    const candidate = path.join(folder, bin);
    if (exists(candidate)) {
      return candidate;
    }
  }
  return 'lsp_server';
}

export function serverPathFromSettings(): string {
  const configured = vscode.workspace.getConfiguration('draftline').get<string>('serverPath') ?? '';
  const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
  return resolveServerPath(configured, folders);
}
