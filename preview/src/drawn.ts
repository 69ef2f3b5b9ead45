// What each panel drew, kept for the report (report.ts): its fields after transformations and field config, and the
// values a stat or bar gauge shows with their colours. hpcobs/delivery/preview_checks.py compares them, and the DOM,
// with the panel's JSON: a unit, threshold or override lost on the way is found there.
import { DataFrame, Field, FieldDisplay, FieldType, formattedValueToString, getFieldDisplayName } from '@grafana/data';

export interface DrawnField {
  name: string;
  type: string;
  unit?: string;
  thresholds?: Array<{ value: number | null; color: string }>;
  cell?: string;
  // For a coloured table column: each value, as formatted and in the colour its thresholds give it.
  shown?: Array<{ value: number | null; text: string; color: string }>;
}

export interface DrawnValue {
  name: string;
  value: number | null;
  text: string;
  color: string;
}

export interface Drawn {
  fields: DrawnField[];
  values?: DrawnValue[];
}

export const drawn: Record<string, Drawn> = {};

const COLOURED_CELLS = new Set(['color-text', 'color-background']);

function finite(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function describe(field: Field, frame: DataFrame, frames: DataFrame[]): DrawnField {
  const { unit, thresholds, custom } = field.config;
  const cell = custom?.cellOptions?.type;
  const described: DrawnField = {
    name: getFieldDisplayName(field, frame, frames),
    type: field.type,
    unit,
    thresholds: thresholds?.steps.map((step) => ({ value: finite(step.value), color: step.color })),
    cell,
  };
  if (field.type === FieldType.number && COLOURED_CELLS.has(cell) && field.display) {
    described.shown = field.values.slice(0, 200).map((value) => {
      const display = field.display!(value);
      return { value: finite(value), text: formattedValueToString(display), color: display.color ?? '' };
    });
  }
  return described;
}

export function recordFields(panelId: number, frames: DataFrame[]): void {
  drawn[panelId] = {
    fields: frames.flatMap((frame) =>
      frame.fields.filter((field) => field.type !== FieldType.time).map((field) => describe(field, frame, frames))
    ),
  };
}

export function recordValues(panelId: number, values: FieldDisplay[]): void {
  drawn[panelId].values = values.map(({ display }) => ({
    name: display.title ?? '',
    value: finite(display.numeric),
    text: formattedValueToString(display),
    color: display.color ?? '',
  }));
}
