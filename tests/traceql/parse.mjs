// Grafana's TraceQL grammar on a JSON list of queries (stdin): null or the first error for each (stdout).
import { parser } from '@grafana/lezer-traceql';
import { check } from '../lezer_check.mjs';

await check(parser);
