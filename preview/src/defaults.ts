// The defaults Grafana's panel plugins fill in before drawing. The plugins themselves are not in the Apache-2.0
// libraries: options come from @grafana/schema's generated panel configs where it has them; the time series'
// field defaults and its legend and tooltip are declared here, as Grafana 11.6's time series panel sets them, and so
// are the heatmap's colour mode and scale, which its generated config leaves out.
import { defaultTableFieldOptions } from '@grafana/schema';
import { defaultOptions as barGaugeOptions } from '@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen.js';
import { defaultOptions as heatmapOptions } from '@grafana/schema/dist/esm/raw/composable/heatmap/panelcfg/x/HeatmapPanelCfg_types.gen.js';
import { defaultOptions as statOptions } from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen.js';
import { defaultOptions as tableOptions } from '@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen.js';

const singleValue = { reduceOptions: { calcs: ['lastNotNull'], values: false, fields: '' }, orientation: 'auto' };

const OPTIONS: Record<string, object> = {
  timeseries: {
    legend: { showLegend: true, displayMode: 'list', placement: 'bottom', calcs: [] },
    tooltip: { mode: 'single', sort: 'none' },
  },
  stat: { ...singleValue, ...statOptions },
  bargauge: { ...singleValue, ...barGaugeOptions },
  table: tableOptions,
  heatmap: withDefaults(heatmapOptions, { color: { mode: 'scheme', scale: 'exponential' } }),
};

const CUSTOM: Record<string, object> = {
  timeseries: {
    drawStyle: 'line',
    lineInterpolation: 'linear',
    lineWidth: 1,
    fillOpacity: 0,
    gradientMode: 'none',
    spanNulls: false,
    insertNulls: false,
    showPoints: 'auto',
    pointSize: 5,
    barAlignment: 0,
    barWidthFactor: 0.6,
    stacking: { mode: 'none', group: 'A' },
    axisPlacement: 'auto',
    axisLabel: '',
    axisColorMode: 'text',
    axisBorderShow: false,
    axisCenteredZero: false,
    scaleDistribution: { type: 'linear' },
    hideFrom: { legend: false, tooltip: false, viz: false },
    thresholdsStyle: { mode: 'off' },
  },
  table: defaultTableFieldOptions,
};

// `value` with every key it lacks taken from `fallback`, objects merged key by key (arrays are values).
export function withDefaults<T>(value: T, fallback: unknown): T {
  if (!isObject(value) || !isObject(fallback)) {
    return value === undefined ? (fallback as T) : value;
  }
  const merged: Record<string, unknown> = { ...value };
  for (const [key, inner] of Object.entries(fallback)) {
    merged[key] = withDefaults(merged[key], inner);
  }
  return merged as T;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function panelOptions(panel: any): any {
  return withDefaults(panel.options ?? {}, OPTIONS[panel.type] ?? {});
}

export function panelFieldConfig(panel: any): any {
  const { defaults = {}, overrides = [] } = panel.fieldConfig ?? {};
  return { defaults: { ...defaults, custom: withDefaults(defaults.custom ?? {}, CUSTOM[panel.type] ?? {}) }, overrides };
}
