// Where the cursor comes to rest on a new line, the server is told (`draftline/cursor`): it
// prefills the window there in the background, so the first suggestion at a new spot sees the
// whole window instead of a cold one. VS Code sends no cursor with didOpen or didChange; while
// the user types, the inline requests themselves say where it is, so a line just edited is not sent.
import * as vscode from 'vscode';
import { LanguageClient } from 'vscode-languageclient/node';

export const CURSOR = 'draftline/cursor';
const TYPING_MS = 1000; // a document edited this recently is being typed in

export class CursorRest implements vscode.Disposable {
  private timer: NodeJS.Timeout | undefined;
  private sent = ''; // "uri line" last sent
  private readonly edited = new Map<string, number>(); // uri -> when it last changed
  private readonly subscriptions: vscode.Disposable[];

  constructor(private readonly client: () => LanguageClient | undefined, private readonly delayMs = 200) {
    this.subscriptions = [
      vscode.window.onDidChangeTextEditorSelection((e) => this.later(e.textEditor)),
      // A file opened or brought to the front: at once, as someone may type within a fraction of a
      // second, and the server's first window there needs that time.
      vscode.window.onDidChangeActiveTextEditor((editor) => editor && this.send(editor)),
      vscode.workspace.onDidChangeTextDocument((e) => this.edited.set(e.document.uri.toString(), Date.now())),
    ];
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.subscriptions.forEach((d) => d.dispose());
  }

  private later(editor: vscode.TextEditor): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.send(editor), this.delayMs);
  }

  private send(editor: vscode.TextEditor): void {
    const c = this.client();
    const uri = editor.document.uri.toString();
    const line = editor.selection.active.line;
    if (!c?.isRunning() || editor !== vscode.window.activeTextEditor || `${uri} ${line}` === this.sent ||
        Date.now() - (this.edited.get(uri) ?? 0) < TYPING_MS) {
      return;
    }
    this.sent = `${uri} ${line}`;
    void c.sendNotification(CURSOR, { textDocument: { uri }, position: { line, character: 0 } });
  }
}
