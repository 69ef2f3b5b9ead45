// What hpcobs/delivery/preview.py hands the page (window.PREVIEW_INPUT, written as input.js beside index.html).
import type { DataFrameDTO } from '@grafana/data';

export interface PanelInput {
  // Frames as Grafana's Prometheus data source returns them: one per series, or one per query for a table.
  frames: DataFrameDTO[];
  // A query Prometheus refused, or why the panel is not drawn (Loki with no Loki, a panel with no component).
  error?: string;
  placeholder?: string;
}

export interface PreviewInput {
  dashboard: any; // the built dashboard JSON (out/grafana/dashboards/...), Grafana 11.6's model
  width: number; // of the page, in CSS pixels
  from: number; // the time range, in epoch milliseconds
  to: number;
  variables: Record<string, string>; // as resolved for the queries, for titles and legends
  panels: Record<string, PanelInput>; // by panel id
}

declare global {
  interface Window {
    PREVIEW_INPUT: PreviewInput;
    previewReport?: Promise<unknown>;
    __grafana_public_path__?: string;
  }
}
