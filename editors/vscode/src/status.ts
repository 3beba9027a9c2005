// The status bar item: model state, last latency and acceptance rate from `draftline/status`.
import * as vscode from 'vscode';

/** Params of the server's `draftline/status` notification. */
export interface ServerStatus {
  state: 'starting' | 'loading' | 'ready' | 'error' | 'disabled';
  message?: string;
  lastLatencyMs?: number | null;
  acceptanceRate?: number | null; // drafted tokens the target accepted (speculative hit rate)
}

const ICONS: Record<ServerStatus['state'], string> = {
  starting: '$(sync~spin)',
  loading: '$(sync~spin)',
  ready: '$(check)',
  error: '$(error)',
  disabled: '$(circle-slash)',
};

/** Short status bar text, e.g. "$(check) Draftline 84 ms · 40%". */
export function statusText(s: ServerStatus): string {
  const parts = [ICONS[s.state] ?? '', 'Draftline'];
  if (s.state === 'loading' || s.state === 'starting') {
    parts.push('loading');
  } else if (s.state === 'disabled') {
    parts.push('off');
  } else if (s.state === 'error') {
    parts.push('error');
  } else {
    if (typeof s.lastLatencyMs === 'number') {
      parts.push(`${Math.round(s.lastLatencyMs)} ms`);
    }
    if (typeof s.acceptanceRate === 'number') {
      parts.push(`· ${Math.round(s.acceptanceRate * 100)}%`);
    }
  }
  return parts.join(' ');
}

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private current: ServerStatus = { state: 'starting' };

  constructor() {
    this.item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
    this.item.command = 'draftline.showStats';
    this.update({ state: 'starting' });
    this.item.show();
  }

  get status(): ServerStatus {
    return this.current;
  }

  update(s: ServerStatus): void {
    this.current = s;
    this.item.text = statusText(s);
    const detail = s.state === 'ready' ? ' (last latency; share of drafted tokens the model accepted)' : '';
    this.item.tooltip = `Draftline: ${s.message || s.state}${detail}`;
  }

  dispose(): void {
    this.item.dispose();
  }
}
