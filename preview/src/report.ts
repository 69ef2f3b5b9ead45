// What the page shows, read from its DOM once drawn: per panel its state and text, the legend, table headers and
// cells with their colours, what it drew (drawn.ts); the page's height and width for the screenshot, and every
// uncaught error or console error (React reports render failures there). Colours are given as the browser computes
// them (rgb(...)), so that a threshold's colour name, a display colour and a cell's style compare as equal strings.
import { GrafanaTheme2 } from '@grafana/data';

import { Drawn, drawn } from './drawn';
import './input';

const SETTLE_MS = 300; // icons arrive by fetch after the first paint
const TABLE_ROWS = 30;

const errors: string[] = [];

export function watchErrors(): void {
  window.addEventListener('error', (event) => errors.push(`uncaught: ${event.message}`));
  window.addEventListener('unhandledrejection', (event) => errors.push(`unhandled rejection: ${event.reason}`));
  const consoleError = console.error;
  console.error = (...args: unknown[]) => {
    errors.push(`console.error: ${args.map(String).join(' ')}`.slice(0, 500));
    consoleError(...args);
  };
}

function state(panel: Element): { state: string; message?: string } {
  for (const kind of ['error', 'placeholder', 'nodata']) {
    const found = panel.querySelector(`[data-preview-${kind}]`);
    if (found) {
      return { state: kind, message: found.textContent ?? '' };
    }
  }
  return { state: 'drawn' };
}

// Any CSS colour as the browser computes it.
function computed(colour: string): string {
  const probe = document.createElement('span');
  probe.style.color = colour;
  document.body.appendChild(probe);
  const rgb = getComputedStyle(probe).color;
  probe.remove();
  return rgb;
}

function texts(panel: Element, selector: string): string[] {
  return [...panel.querySelectorAll(selector)].map((element) => (element.textContent ?? '').trim());
}

function tableRows(panel: Element) {
  const rows = [...panel.querySelectorAll('[role="row"]')].filter((row) => row.querySelector('[role="cell"]'));
  return rows.slice(0, TABLE_ROWS).map((row) =>
    [...row.querySelectorAll('[role="cell"]')].map((cell) => {
      const style = getComputedStyle(cell);
      return { text: (cell.textContent ?? '').trim(), color: style.color, background: style.backgroundColor };
    })
  );
}

// Display colours in the browser's terms, and every threshold colour name the panels use with its colour.
function inBrowserColours(shown: Drawn | undefined): Drawn | undefined {
  return (
    shown && {
      fields: shown.fields.map((field) => ({
        ...field,
        shown: field.shown?.map((cell) => ({ ...cell, color: computed(cell.color) })),
      })),
      values: shown.values?.map((value) => ({ ...value, color: computed(value.color) })),
    }
  );
}

// Every colour name the dashboard's JSON gives (threshold steps, value mappings), as the theme draws it.
function colourNames(value: unknown, found: Set<string>): Set<string> {
  if (Array.isArray(value)) {
    value.forEach((item) => colourNames(item, found));
  } else if (typeof value === 'object' && value !== null) {
    for (const [key, inner] of Object.entries(value)) {
      if (key === 'color' && typeof inner === 'string') {
        found.add(inner);
      } else {
        colourNames(inner, found);
      }
    }
  }
  return found;
}

function palette(theme: GrafanaTheme2): Record<string, string> {
  const names = colourNames(window.PREVIEW_INPUT.dashboard.panels, new Set());
  return Object.fromEntries([...names].map((name) => [name, computed(theme.visualization.getColorByName(name))]));
}

export async function report(theme: GrafanaTheme2) {
  await document.fonts.ready;
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  const panels = [...document.querySelectorAll<HTMLElement>('[data-preview-panel]')].map((panel) => ({
    id: Number(panel.dataset.previewPanel),
    title: panel.dataset.title,
    type: panel.dataset.type,
    ...state(panel),
    text: panel.innerText.slice(0, 400),
    legend: texts(panel, '[data-testid^="data-testid VizLegend series"]'),
    headers: texts(panel, '[role="columnheader"]'),
    rows: tableRows(panel),
    drawn: inBrowserColours(drawn[panel.dataset.previewPanel!]),
  }));
  const boxes = [...document.querySelectorAll('[data-preview-panel], [data-preview-row]')].map((element) =>
    element.getBoundingClientRect()
  );
  const bottom = Math.max(...boxes.map((box) => box.bottom + window.scrollY));
  const right = Math.max(...boxes.map((box) => box.right + window.scrollX));
  return { panels, palette: palette(theme), height: Math.ceil(bottom) + 16, width: Math.ceil(right) + 16, errors };
}
