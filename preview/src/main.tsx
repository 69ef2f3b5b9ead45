// The page: draws window.PREVIEW_INPUT's dashboard, panel by panel at its grid position, with Grafana's dark theme,
// then resolves window.previewReport with what the DOM shows (report.ts) for hpcobs/delivery/preview.py to read.
import { createTheme, dateTime, ThemeContext } from '@grafana/data';
import { GlobalStyles } from '@grafana/ui';
import React, { useEffect } from 'react';
import { createRoot } from 'react-dom/client';
// uPlot's own stylesheet places the plot, its cursor and its legend; Grafana's app loads it, @grafana/ui does not.
import 'uplot/dist/uPlot.min.css';

import { place } from './grid';
import { PreviewInput } from './input';
import { Panel } from './panel';
import { report, watchErrors } from './report';
import { registerTransformers } from './transformations';

const PADDING = 16;
const ROW_TITLE: React.CSSProperties = { fontSize: 16, fontWeight: 500, lineHeight: '30px' };

// $name and ${name} in titles, as the queries had them.
function interpolator(variables: Record<string, string>) {
  return (text: string) =>
    text.replace(/\$\{(\w+)(?::\w+)?\}|\$(\w+)/g, (whole, braced, bare) => variables[braced ?? bare] ?? whole);
}

// A row is a title on the grid; a collapsed row's panels are inside it and stay hidden, as in Grafana.
function Dashboard({ input, onDrawn }: { input: PreviewInput; onDrawn: () => void }) {
  const theme = React.useContext(ThemeContext);
  const width = input.width - 2 * PADDING;
  const replaceVariables = interpolator(input.variables);
  const timeRange = {
    from: dateTime(input.from),
    to: dateTime(input.to),
    raw: { from: dateTime(input.from), to: dateTime(input.to) },
  };
  useEffect(() => onDrawn(), []);
  return (
    <div style={{ position: 'relative', margin: PADDING }}>
      <h1 style={{ fontSize: 20, margin: '0 0 16px' }}>{input.dashboard.title}</h1>
      <div style={{ position: 'relative' }}>
        {input.dashboard.panels.map((panel: any) => {
          const box = place(panel.gridPos, width);
          return panel.type === 'row' ? (
            <div key={panel.id} data-preview-row={panel.id} style={{ position: 'absolute', ...box, ...ROW_TITLE }}>
              {panel.collapsed ? '▸ ' : '▾ '}
              {replaceVariables(panel.title)}
            </div>
          ) : (
            <Panel
              key={panel.id}
              panel={panel}
              input={input.panels[panel.id]}
              box={box}
              theme={theme}
              timeRange={timeRange}
              replaceVariables={replaceVariables}
            />
          );
        })}
      </div>
    </div>
  );
}

const input = window.PREVIEW_INPUT;
const theme = createTheme({ colors: { mode: 'dark' } });
watchErrors();
registerTransformers();
window.previewReport = new Promise((resolve) => {
  createRoot(document.getElementById('root')!).render(
    <ThemeContext.Provider value={theme}>
      <GlobalStyles />
      <Dashboard input={input} onDrawn={() => void report(theme).then(resolve)} />
    </ThemeContext.Provider>
  );
});
