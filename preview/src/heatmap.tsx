// hpcobs's own drawing of a heatmap panel whose rows are series (`calculate: false`): Grafana's heatmap panel is
// core and AGPL, and @grafana/ui exports no heatmap, so this is written from the panel's options, not from that
// plugin. One row per series, one column per time step, each cell in its value's colour on the panel's scale;
// row names on the left, UTC times below, the colour scale with its min and max under them. No tooltip, no
// calculated buckets, no cell values, no exemplars.
import {
  colorManipulator,
  DataFrame,
  dateTimeFormat,
  FieldType,
  formattedValueToString,
  getFieldDisplayName,
  getValueFormat,
  GrafanaTheme2,
  systemDateFormats,
} from '@grafana/data';
import { measureText } from '@grafana/ui';
import * as chromatic from 'd3-scale-chromatic';
import React, { useLayoutEffect, useRef } from 'react';

import type { VizProps } from './visualizations';

// As the time series panel's axes (@grafana/ui's UPlotAxisBuilder): 12 px labels, 4 px ticks, 5 px gap, and
// neighbouring time labels at least 18 px apart.
const FONT_SIZE = 12;
const TICK = 4;
const GAP = 5;
const TIME_LABEL_GAP = 18;
const TIME_AXIS_HEIGHT = TICK + GAP + FONT_SIZE + 4;
const LEGEND_HEIGHT = 24;
const LEGEND_BAR_WIDTH = 240;
const MIN_ROW_LABEL_SPACING = FONT_SIZE + 2;
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const TIME_INCREMENTS = [
  MINUTE, 2 * MINUTE, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE, 30 * MINUTE,
  HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY,
]; // prettier-ignore

interface Row {
  name: string;
  times: number[];
  values: Array<number | null>;
  step: number; // ms a cell spans: the frame's interval, as the query's step
}

interface ColorOptions {
  mode: 'scheme' | 'opacity';
  scheme: string;
  fill: string;
  scale: 'linear' | 'exponential';
  exponent: number;
  steps: number;
  reverse: boolean;
  min?: number;
  max?: number;
}

// Rows ascend from the bottom, as Grafana's rows layout orders series it reads as buckets. Names that are all
// numbers (bucket bounds: "0.5", "1", "+Inf") go by value; other names, such as our bands ("0-10%") and nodes, go by
// name with the numbers in them compared as numbers ("gpu2" before "gpu10", "10-20%" after "0-10%"), where a plain
// string order would put "10-20%" before "2-3%".
const byName = new Intl.Collator('en', { numeric: true }).compare;

function bound(name: string): number {
  return name.trim() === '' ? NaN : Number(name.replace(/inf$/i, 'Infinity'));
}

function ordered(rows: Row[]): Row[] {
  const numeric = rows.every((row) => !Number.isNaN(bound(row.name)));
  return [...rows].sort((a, b) => (numeric ? bound(a.name) - bound(b.name) : byName(a.name, b.name)));
}

function rowsOf(frames: DataFrame[]): Row[] {
  return frames.flatMap((frame) => {
    const time = frame.fields.find((field) => field.type === FieldType.time);
    if (!time) {
      return [];
    }
    const times: number[] = time.values;
    const step = time.config.interval ?? (times.length > 1 ? times[1] - times[0] : 0);
    return frame.fields
      .filter((field) => field.type === FieldType.number)
      .map((field) => ({ name: getFieldDisplayName(field, frame, frames), times, values: field.values, step }));
  });
}

function finiteValues(rows: Row[]): number[] {
  return rows.flatMap((row) => row.values.filter((value): value is number => Number.isFinite(value)));
}

// The colours of the scale, lowest first: a scheme sampled at `steps` points (as Grafana's schemes, d3's
// interpolators), or the fill colour from transparent to opaque.
function palette(color: ColorOptions, theme: GrafanaTheme2): string[] {
  const at = (index: number) => index / Math.max(color.steps - 1, 1);
  if (color.mode === 'opacity') {
    const fill = theme.visualization.getColorByName(color.fill);
    return Array.from({ length: color.steps }, (_, index) => colorManipulator.alpha(fill, at(index)));
  }
  const interpolate = (chromatic as Record<string, unknown>)[`interpolate${color.scheme}`];
  if (typeof interpolate !== 'function') {
    throw new Error(`heatmap colour scheme ${color.scheme} is not one of d3-scale-chromatic's`);
  }
  const colours = Array.from({ length: color.steps }, (_, index) => interpolate(at(index)) as string);
  return color.reverse ? colours.reverse() : colours;
}

// Where a value falls on the scale, 0 to 1: linear, or raised to the exponent (0.5 widens the low end).
function position(value: number, min: number, max: number, color: ColorOptions): number {
  const linear = Math.min(Math.max((value - min) / (max - min || 1), 0), 1);
  return color.scale === 'exponential' ? linear ** color.exponent : linear;
}

function timeTicks(from: number, to: number, plotWidth: number): { times: number[]; format: string } {
  const format = to - from <= DAY ? systemDateFormats.interval.minute : systemDateFormats.interval.hour;
  const spacing = measureText(dateTimeFormat(to, { format, timeZone: 'utc' }), FONT_SIZE).width + TIME_LABEL_GAP;
  const increment =
    TIME_INCREMENTS.find((candidate) => (candidate / (to - from)) * plotWidth >= spacing) ?? TIME_INCREMENTS.at(-1)!;
  const times: number[] = [];
  for (let time = Math.ceil(from / increment) * increment; time <= to; time += increment) {
    times.push(time);
  }
  return { times, format };
}

const label = (theme: GrafanaTheme2): React.CSSProperties => ({
  position: 'absolute',
  fontSize: FONT_SIZE,
  lineHeight: `${FONT_SIZE}px`,
  fontFamily: theme.typography.fontFamily,
  color: theme.colors.text.primary,
  whiteSpace: 'nowrap',
});

export function HeatmapViz({ frames, options, width, height, theme, timeRange }: VizProps) {
  const canvas = useRef<HTMLCanvasElement>(null);
  const color: ColorOptions = options.color;
  const rows = ordered(rowsOf(frames));
  const drawn = options.yAxis?.reverse ? rows : [...rows].reverse(); // top to bottom
  const values = finiteValues(rows);
  const min = color.min ?? Math.min(...values);
  const max = color.max ?? Math.max(...values);
  const colours = palette(color, theme);
  const field = frames.flatMap((frame) => frame.fields).find((candidate) => candidate.type === FieldType.number);
  const format = getValueFormat(options.cellValues?.unit || field?.config.unit || 'none');
  const decimals = options.cellValues?.decimals ?? field?.config.decimals;
  const formatted = (value: number) => formattedValueToString(format(value, decimals));

  const axisWidth = Math.ceil(
    Math.min(Math.max(0, ...drawn.map((row) => measureText(row.name, FONT_SIZE).width)), width * 0.4) + GAP + TICK
  );
  const legendHeight = options.legend?.show ? LEGEND_HEIGHT : 0;
  const plot = {
    left: axisWidth,
    top: 0,
    width: width - axisWidth - GAP,
    height: height - TIME_AXIS_HEIGHT - legendHeight,
  };
  const rowHeight = plot.height / Math.max(drawn.length, 1);
  const labelEvery = Math.ceil(MIN_ROW_LABEL_SPACING / rowHeight);
  const from = timeRange.from.valueOf();
  const to = timeRange.to.valueOf();
  const xOf = (time: number) => plot.left + ((time - from) / (to - from)) * plot.width;
  const ticks = timeTicks(from, to, plot.width);
  const tickColor = theme.isDark ? 'rgba(240, 250, 255, 0.09)' : 'rgba(0, 10, 23, 0.09)'; // the time series' ticks

  useLayoutEffect(() => {
    const scale = window.devicePixelRatio;
    const context = canvas.current!.getContext('2d')!;
    context.clearRect(0, 0, width * scale, height * scale);
    // Cell edges on whole device pixels, so that neighbours neither overlap nor leave hairlines. The gap between
    // cells is kept where cells are at least three gaps wide (or high), else dropped along that axis: a gap as wide
    // as the cell would stripe the picture. Decided from a step's width, not each cell's, whose rounding varies.
    const gap = (options.cellGap ?? 0) * scale;
    const gapWhere = (cellSize: number) => (cellSize * scale >= 3 * gap ? gap : 0);
    const rowGap = gapWhere(rowHeight);
    const edge = (css: number) => Math.round(css * scale);
    drawn.forEach((row, index) => {
      const top = edge(plot.top + index * rowHeight);
      const bottom = edge(plot.top + (index + 1) * rowHeight);
      const columnGap = gapWhere((row.step / (to - from)) * plot.width);
      row.values.forEach((value, column) => {
        if (!Number.isFinite(value)) {
          return; // a gap in the series is an empty cell
        }
        const time = row.times[column];
        const left = edge(Math.max(xOf(time), plot.left));
        const right = edge(Math.min(xOf(time + row.step), plot.left + plot.width));
        if (right <= left) {
          return;
        }
        const colour = Math.min(Math.floor(position(value!, min, max, color) * colours.length), colours.length - 1);
        context.fillStyle = colours[colour];
        context.fillRect(left, top, right - left - columnGap, bottom - top - rowGap);
      });
    });
    context.fillStyle = tickColor;
    for (const time of ticks.times) {
      context.fillRect(edge(xOf(time)), edge(plot.top + plot.height), Math.max(1, scale), TICK * scale);
    }
  });

  const timeLabelWidth = measureText(dateTimeFormat(to, { format: ticks.format, timeZone: 'utc' }), FONT_SIZE).width;
  return (
    <div
      data-preview-heatmap=""
      data-rows={drawn.length}
      data-row-names={JSON.stringify(drawn.map((row) => row.name))}
      style={{ position: 'relative', width, height, overflow: 'hidden' }}
    >
      <canvas
        ref={canvas}
        width={width * window.devicePixelRatio}
        height={height * window.devicePixelRatio}
        style={{ position: 'absolute', left: 0, top: 0, width, height }}
      />
      {drawn.map((row, index) =>
        index % labelEvery === 0 ? (
          <span
            key={row.name}
            style={{
              ...label(theme),
              right: width - axisWidth + GAP,
              top: plot.top + (index + 0.5) * rowHeight - FONT_SIZE / 2,
              maxWidth: axisWidth - GAP,
              overflow: 'hidden',
              textOverflow: 'ellipsis',
            }}
          >
            {row.name}
          </span>
        ) : null
      )}
      {ticks.times
        .filter((time) => xOf(time) - timeLabelWidth / 2 >= 0 && xOf(time) + timeLabelWidth / 2 <= width)
        .map((time) => (
          <span
            key={time}
            style={{
              ...label(theme),
              left: xOf(time),
              top: plot.top + plot.height + TICK + GAP,
              transform: 'translateX(-50%)',
            }}
          >
            {dateTimeFormat(time, { format: ticks.format, timeZone: 'utc' })}
          </span>
        ))}
      {options.legend?.show && (
        <div
          style={{
            ...label(theme),
            left: plot.left,
            bottom: 0,
            height: LEGEND_HEIGHT,
            display: 'flex',
            alignItems: 'center',
            gap: 8,
            color: theme.colors.text.secondary,
          }}
        >
          <span>{formatted(min)}</span>
          <span
            style={{
              width: Math.min(LEGEND_BAR_WIDTH, plot.width / 2),
              height: 10,
              borderRadius: theme.shape.radius.default,
              background: `linear-gradient(to right, ${colours.join(', ')})`,
            }}
          />
          <span>{formatted(max)}</span>
        </div>
      )}
    </div>
  );
}
