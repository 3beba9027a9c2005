// Formats the server's `draftline.stats` answer for people.

/** Result of the server's `draftline.stats` command. */
export interface Stats {
  requests: number;
  generated: number;
  cancelled: number;
  cacheHits: number;
  accepted: number; // suggestions taken whole
  partiallyAccepted: number; // accept word / line reports
  acceptedChars: number; // UTF-16 code units those took
  shown: number;
  acceptanceRate: number | null; // drafted tokens the target accepted (speculative hit rate)
  p50Ms: number | null;
  p95Ms: number | null;
  lastLatencyMs: number | null;
  state: string;
}

const ms = (v: number | null | undefined): string => (typeof v === 'number' ? `${Math.round(v)} ms` : 'n/a');

export function formatStats(s: Stats): string {
  const rate = typeof s.acceptanceRate === 'number' ? `${Math.round(s.acceptanceRate * 100)}%` : 'n/a';
  return (
    `Draftline (${s.state}): ${s.requests} requests, ${s.generated} generated, ` +
    `${s.accepted} accepted of ${s.shown} shown, ${s.partiallyAccepted} partly (${s.acceptedChars} chars), ` +
    `${s.cancelled} cancelled, ${s.cacheHits} cache hits; ` +
    `draft tokens accepted ${rate}; latency p50 ${ms(s.p50Ms)}, p95 ${ms(s.p95Ms)}, last ${ms(s.lastLatencyMs)}`
  );
}
