// One drawing per panel type, each with @grafana/ui's component for it and the options as the panel JSON sets them;
// the frames have been through the panel's transformations and field config already (panel.tsx). Not here: the
// gauge (11.6's Gauge draws with jQuery flot's gauge plugin, which Grafana's core loads, not the libraries; no
// hpcobs panel is a gauge), and the panels no exported component draws (logs, text). The heatmap has no exported
// component either (Grafana's heatmap panel is core, AGPL): it is hpcobs's own drawing (heatmap.tsx).
import {
  DataFrame,
  FieldDisplay,
  getDisplayValueAlignmentFactors,
  getFieldDisplayValues,
  GrafanaTheme2,
  InterpolateFunction,
  TimeRange,
} from '@grafana/data';
import { BarGauge, BigValue, Table, TimeSeries, VizRepeater } from '@grafana/ui';
import React from 'react';

import { recordValues } from './drawn';
import { HeatmapViz } from './heatmap';

export interface VizProps {
  panelId: number;
  frames: DataFrame[];
  options: any;
  fieldConfig: any;
  width: number;
  height: number;
  theme: GrafanaTheme2;
  timeRange: TimeRange;
  replaceVariables: InterpolateFunction;
}

function TimeSeriesViz({ frames, options, width, height, timeRange }: VizProps) {
  return (
    <TimeSeries
      frames={frames}
      timeRange={timeRange}
      timeZone="utc"
      width={width}
      height={height}
      legend={options.legend}
      options={options}
    />
  );
}

// Stat and bar gauge repeat one drawing per value the reduce options give, as Grafana's panels do.
function repeated(
  { panelId, frames, options, fieldConfig, width, height, theme, replaceVariables }: VizProps,
  draw: (value: FieldDisplay, width: number, height: number, alignment: any, count: number) => React.JSX.Element,
  sparkline = false
) {
  const values = getFieldDisplayValues({
    data: frames,
    reduceOptions: options.reduceOptions,
    fieldConfig,
    replaceVariables,
    theme,
    sparkline,
    timeZone: 'utc',
  });
  recordValues(panelId, values);
  return (
    <VizRepeater
      source={frames}
      getValues={() => values}
      getAlignmentFactors={getDisplayValueAlignmentFactors}
      renderValue={({ value, width, height, alignmentFactors, count }) =>
        draw(value, width, height, alignmentFactors, count)
      }
      renderCounter={0}
      width={width}
      height={height}
      orientation={options.orientation}
      itemSpacing={3}
      autoGrid={true}
      minVizWidth={options.minVizWidth ?? 75}
      minVizHeight={options.minVizHeight ?? 75}
      maxVizHeight={options.maxVizHeight}
    />
  );
}

function StatViz(props: VizProps) {
  const { options, theme } = props;
  return repeated(
    props,
    (value, width, height, alignmentFactors, count) => (
      <BigValue
        value={value.display}
        sparkline={value.sparkline}
        count={count}
        width={width}
        height={height}
        theme={theme}
        colorMode={options.colorMode}
        graphMode={options.graphMode}
        justifyMode={options.justifyMode}
        textMode={options.textMode}
        text={options.text}
        percentChangeColorMode={options.percentChangeColorMode}
        alignmentFactors={alignmentFactors}
        disableWideLayout={!options.wideLayout}
      />
    ),
    options.graphMode !== 'none'
  );
}

function BarGaugeViz(props: VizProps) {
  const { options, theme } = props;
  return repeated(props, (value, width, height, alignmentFactors) => (
    <BarGauge
      value={value.display}
      field={value.field}
      width={width}
      height={height}
      theme={theme}
      orientation={options.orientation}
      displayMode={options.displayMode}
      showUnfilled={options.showUnfilled}
      valueDisplayMode={options.valueMode}
      namePlacement={options.namePlacement}
      text={options.text}
      itemSpacing={3}
      alignmentFactors={alignmentFactors}
      isOverflow={false}
    />
  ));
}

function TableViz({ frames, options, fieldConfig, width, height, timeRange, replaceVariables }: VizProps) {
  return (
    <Table
      data={frames[options.frameIndex] ?? frames[0]}
      width={width}
      height={height}
      noHeader={!options.showHeader}
      showTypeIcons={options.showTypeIcons}
      cellHeight={options.cellHeight}
      initialSortBy={options.sortBy}
      footerOptions={options.footer}
      fieldConfig={fieldConfig}
      timeRange={timeRange}
      replaceVariables={replaceVariables}
    />
  );
}

export const VISUALIZATIONS: Record<string, (props: VizProps) => React.JSX.Element> = {
  timeseries: TimeSeriesViz,
  stat: StatViz,
  bargauge: BarGaugeViz,
  table: TableViz,
  heatmap: HeatmapViz,
};
