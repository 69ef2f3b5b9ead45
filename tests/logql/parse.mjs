// Grafana's LogQL grammar on a JSON list of expressions (stdin): null or the first error for each (stdout).
import { parser } from '@grafana/lezer-logql';
import { check } from '../lezer_check.mjs';

await check(parser);
