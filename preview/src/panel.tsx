// One panel in PanelChrome (title, description, error status) at its place on the grid. What it shows is marked in
// the DOM for the report (report.ts): data-preview-error, -placeholder or -nodata, or the drawing itself.
import { createDataFrame, DataFrame, GrafanaTheme2, InterpolateFunction, TimeRange } from '@grafana/data';
import { PanelChrome } from '@grafana/ui';
import React from 'react';

import { panelFieldConfig, panelOptions } from './defaults';
import { recordFields } from './drawn';
import { loaded, withFieldConfig } from './fieldConfig';
import { Box } from './grid';
import { PanelInput } from './input';
import { transformed } from './transformations';
import { VISUALIZATIONS } from './visualizations';

interface Props {
  panel: any;
  input: PanelInput | undefined;
  box: Box;
  theme: GrafanaTheme2;
  timeRange: TimeRange;
  replaceVariables: InterpolateFunction;
}

const centred: React.CSSProperties = {
  display: 'flex',
  height: '100%',
  alignItems: 'center',
  justifyContent: 'center',
  textAlign: 'center',
  padding: 8,
  overflow: 'hidden',
};

class Caught extends React.Component<{ children: React.ReactNode }, { error?: Error }> {
  state: { error?: Error } = {};

  static getDerivedStateFromError(error: Error) {
    return { error };
  }

  render() {
    const { error } = this.state;
    return error ? <Message kind="error" text={`render error: ${error.message}`} /> : this.props.children;
  }
}

function Message({ kind, text }: { kind: 'error' | 'placeholder' | 'nodata'; text: string }) {
  return (
    <div style={centred} {...{ [`data-preview-${kind}`]: '' }}>
      {text}
    </div>
  );
}

function hasValues(frames: DataFrame[]): boolean {
  return frames.some((frame) => frame.length > 0);
}

// The frames as the panel draws them, or the reason it draws none; inside the error boundary, so that a failure in
// the transformations or the field config is this panel's error, not the page's.
function Body(props: Props & { width: number; height: number }) {
  const { panel, input, theme, timeRange, replaceVariables, width, height } = props;
  const draw = VISUALIZATIONS[panel.type];
  if (input?.error) {
    return <Message kind="error" text={input.error} />;
  }
  if (input?.placeholder || !draw) {
    const why = `${panel.type} panel: drawn by Grafana's own panel plugin (AGPL), which previews do not use`;
    return <Message kind="placeholder" text={input?.placeholder ?? why} />;
  }
  const fieldConfig = loaded(panelFieldConfig(panel));
  const frames = withFieldConfig(
    transformed(panel.transformations, (input?.frames ?? []).map(createDataFrame), replaceVariables),
    fieldConfig,
    theme,
    replaceVariables
  );
  recordFields(panel.id, frames);
  if (!hasValues(frames)) {
    return <Message kind="nodata" text={fieldConfig.defaults.noValue ?? 'No data'} />;
  }
  const options = panelOptions(panel);
  return draw({ panelId: panel.id, frames, options, fieldConfig, width, height, theme, timeRange, replaceVariables });
}

export function Panel(props: Props) {
  const { panel, input, box } = props;
  return (
    <div
      data-preview-panel={panel.id}
      data-title={panel.title}
      data-type={panel.type}
      style={{ position: 'absolute', ...box }}
    >
      <PanelChrome
        width={box.width}
        height={box.height}
        title={props.replaceVariables(panel.title)}
        description={panel.description}
        statusMessage={input?.error}
      >
        {(width, height) => (
          <Caught>
            <Body {...props} width={width} height={height} />
          </Caught>
        )}
      </PanelChrome>
    </div>
  );
}
