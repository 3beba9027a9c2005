// Next-edit suggestions: after a pause following an edit, ask the server (`draftline/nextEdit`)
// for the matching change where it is due and show it as a decoration at its range: what goes
// struck through, what comes after it. `draftline.acceptNextEdit` (Tab while one is shown) makes
// it and moves the cursor there, then asks for the next one at once; an edit out of view is
// marked first, with a hint at the cursor's line, and the first Tab only jumps there.
// `draftline.dismissNextEdit` (Escape) or any change to the document hides it. An edit is shown
// and made only for the document version it was computed for.
import * as vscode from 'vscode';
import { LanguageClient } from 'vscode-languageclient/node';

export const NEXT_EDIT = 'draftline/nextEdit';
const VISIBLE = 'draftline.nextEditVisible'; // the context key the keybindings test

/** The server's answer: replace [start, end) (UTF-16 positions, as VS Code's) with `text`. */
export interface NextEdit {
  start: { line: number; character: number };
  end: { line: number; character: number };
  text: string;
  version: number;
}

/** The position right after `text` once inserted at `start`. */
export function endOf(start: { line: number; character: number }, text: string): { line: number; character: number } {
  const lines = text.split('\n');
  const last = lines[lines.length - 1];
  return lines.length === 1 ? { line: start.line, character: start.character + last.length }
    : { line: start.line + lines.length - 1, character: last.length };
}

/** The new text as one line of decoration (which cannot span lines). */
export function previewText(text: string): string {
  return ` → ${text.split('\n').map((l) => l.trim()).join(' ⏎ ')}`;
}

/** Whether `line` lies outside every visible range (none known: it is in view). */
export function outOfView(line: number, visible: readonly { start: { line: number }; end: { line: number } }[]): boolean {
  return visible.length > 0 && !visible.some((r) => r.start.line <= line && line <= r.end.line);
}

/** The hint at the cursor's line for an edit at `line`, out of view. */
export function hintText(cursorLine: number, line: number): string {
  return `  ${line > cursorLine ? '↓' : '↑'} line ${line + 1}: next edit (Tab)`;
}

interface Styles {
  removed: vscode.TextEditorDecorationType;
  added: vscode.TextEditorDecorationType;
  hint: vscode.TextEditorDecorationType;
}

export class NextEdits implements vscode.Disposable {
  private shown: { editor: vscode.TextEditor; edit: NextEdit; away: boolean } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private styles: Styles | undefined;
  private readonly subscriptions: vscode.Disposable[];

  constructor(private readonly client: () => LanguageClient | undefined, private readonly delayMs = 600) {
    this.subscriptions = [
      vscode.workspace.onDidChangeTextDocument((e) => this.changed(e.document)),
      vscode.commands.registerCommand('draftline.acceptNextEdit', () => this.accept()),
      vscode.commands.registerCommand('draftline.dismissNextEdit', () => this.dismiss()),
    ];
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.dismiss();
    Object.values(this.styles ?? {}).forEach((style) => style.dispose());
    this.subscriptions.forEach((d) => d.dispose());
  }

  private changed(document: vscode.TextDocument): void {
    if (this.shown?.editor.document === document) {
      this.dismiss();
    }
    const editor = vscode.window.activeTextEditor;
    if (editor?.document !== document) {
      return;
    }
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.request(editor), this.delayMs);
  }

  /** Ask for the next edit at the editor's cursor, for the document's current version. */
  async request(editor: vscode.TextEditor): Promise<NextEdit | undefined> {
    const c = this.client();
    const document = editor.document;
    if (!c?.isRunning()) {
      return undefined;
    }
    const version = document.version;
    const edit = await c.sendRequest<NextEdit | null>(NEXT_EDIT, {
      textDocument: { uri: c.code2ProtocolConverter.asUri(document.uri) },
      position: c.code2ProtocolConverter.asPosition(editor.selection.active),
      version,
    }).catch(() => null); // the server stopped meanwhile: nothing to show
    if (!edit || edit.version !== document.version || vscode.window.activeTextEditor !== editor) {
      return undefined; // none, or the document changed since: never shown for another version
    }
    this.show(editor, edit);
    return edit;
  }

  /** The edit at its range; out of view, a hint at the cursor's line too. */
  private show(editor: vscode.TextEditor, edit: NextEdit, away = outOfView(edit.start.line, editor.visibleRanges)): void {
    const ghost = new vscode.ThemeColor('editorGhostText.foreground');
    this.styles ??= {
      removed: vscode.window.createTextEditorDecorationType({
        backgroundColor: new vscode.ThemeColor('diffEditor.removedTextBackground'), textDecoration: 'line-through' }),
      added: vscode.window.createTextEditorDecorationType({ after: { color: ghost } }),
      hint: vscode.window.createTextEditorDecorationType({ after: { color: ghost } }),
    };
    const range = new vscode.Range(edit.start.line, edit.start.character, edit.end.line, edit.end.character);
    editor.setDecorations(this.styles.removed, [range]);
    editor.setDecorations(this.styles.added, [{ range: new vscode.Range(range.end, range.end),
      renderOptions: { after: { contentText: previewText(edit.text) } } }]);
    const cursor = editor.selection.active;
    editor.setDecorations(this.styles.hint, away ? [{ range: new vscode.Range(cursor.line, 0, cursor.line, 0),
      renderOptions: { after: { contentText: hintText(cursor.line, edit.start.line) } } }] : []);
    this.shown = { editor, edit, away };
    void vscode.commands.executeCommand('setContext', VISIBLE, true);
  }

  /** Hide the shown edit; false when none was shown. */
  dismiss(): boolean {
    const shown = this.shown;
    if (!shown) {
      return false;
    }
    this.shown = undefined;
    Object.values(this.styles ?? {}).forEach((style) => shown.editor.setDecorations(style, []));
    void vscode.commands.executeCommand('setContext', VISIBLE, false);
    return true;
  }

  /** Jump to the edit shown out of view, or make the shown edit, put the cursor at its end and
   * ask for the next one; false when none is shown or the document is no longer at the edit's
   * version. */
  async accept(): Promise<boolean> {
    const shown = this.shown;
    if (!shown) {
      return false;
    }
    const { editor, edit } = shown;
    const range = new vscode.Range(edit.start.line, edit.start.character, edit.end.line, edit.end.character);
    if (shown.away && editor.document.version === edit.version) {
      editor.selection = new vscode.Selection(range.start, range.start);
      editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      this.show(editor, edit, false);
      return true;
    }
    this.dismiss();
    if (editor.document.version !== edit.version) {
      return false;
    }
    const made = await editor.edit((b) => b.replace(range, edit.text));
    if (made) {
      const end = endOf(edit.start, edit.text);
      const at = new vscode.Position(end.line, end.character);
      editor.selection = new vscode.Selection(at, at);
      editor.revealRange(new vscode.Range(at, at));
      clearTimeout(this.timer); // the next one now, not after a pause
      void this.request(editor);
    }
    return made;
  }
}
