// Reads the `draftline.*` settings and finds the server executable.
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';

/** What the server reads from initializationOptions and workspace/didChangeConfiguration. */
export interface ServerSettings {
  model: string;
  draft: string | null;
  mode: string;
  dtype: string | null;
  backend: string;
  maxTokens: number;
  multiline: 'auto' | 'always' | 'never';
  timeBudgetMs: number;
  debounceMs: number;
  enabled: boolean;
}

export function readServerSettings(): ServerSettings {
  const c = vscode.workspace.getConfiguration('draftline');
  return {
    model: c.get<string>('model', 'embedded'),
    draft: c.get<string | null>('draft', null) || null,
    mode: c.get<string>('mode', 'hybrid'),
    dtype: c.get<string | null>('dtype', null) || null,
    backend: c.get<string>('backend', 'auto'),
    maxTokens: c.get<number>('maxTokens', 64),
    multiline: c.get<'auto' | 'always' | 'never'>('multiline', 'auto'),
    timeBudgetMs: c.get<number>('timeBudgetMs', 400),
    debounceMs: c.get<number>('debounceMs', 0),
    enabled: c.get<boolean>('enabled', true),
  };
}

export function readLanguages(): string[] {
  return vscode.workspace.getConfiguration('draftline').get<string[]>('languages', ['python']);
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
  const configured = vscode.workspace.getConfiguration('draftline').get<string>('serverPath', '');
  const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
  return resolveServerPath(configured, folders);
}
