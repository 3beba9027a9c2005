// Builds the LanguageClient that starts `lsp_server --stdio`.
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
} from 'vscode-languageclient/node';
import { ServerSettings } from './settings';

export function createClient(serverPath: string, languages: string[], settings: ServerSettings): LanguageClient {
  const serverOptions: ServerOptions = {
    command: serverPath,
    args: ['--stdio'],
    // torch's idle OpenMP threads spin; passive waiting keeps the editor's machine responsive.
    options: { env: { ...process.env, OMP_WAIT_POLICY: 'PASSIVE' } },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: languages.flatMap((language) => [
      { scheme: 'file', language },
      { scheme: 'untitled', language },
    ]),
    initializationOptions: settings,
    outputChannelName: 'Draftline',
    middleware: {
      // VS Code shows the inline completions; the server's completion-menu fallback is for editors
      // without them. Asking both on each keystroke would double the work, and the server
      // cancels a document's previous request, so one would cancel the other.
      provideCompletionItem: () => [],
    },
  };
  return new LanguageClient('draftline', 'Draftline', serverOptions, clientOptions);
}

/** Pushes changed settings to a running server (section `draftline`). */
export function sendSettings(client: LanguageClient, settings: ServerSettings): Promise<void> {
  return client.sendNotification(DidChangeConfigurationNotification.type, { settings: { draftline: settings } });
}

/** Runs one of the server's `workspace/executeCommand` commands, e.g. `draftline.stats`. */
export function serverCommand<T>(client: LanguageClient, command: string, args: unknown[] = []): Promise<T> {
  return client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }) as Promise<T>;
}
