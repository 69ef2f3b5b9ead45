// Grafana's dashboard grid: 24 columns, rows of 30 px, 8 px between panels both ways.
const COLUMNS = 24;
const ROW_HEIGHT = 30;
const MARGIN = 8;

export interface GridPos {
  x: number;
  y: number;
  w: number;
  h: number;
}

export interface Box {
  left: number;
  top: number;
  width: number;
  height: number;
}

export function place(pos: GridPos, width: number): Box {
  const column = (width - MARGIN * (COLUMNS - 1)) / COLUMNS;
  return {
    left: Math.round(pos.x * (column + MARGIN)),
    top: pos.y * (ROW_HEIGHT + MARGIN),
    width: Math.round(pos.w * column + (pos.w - 1) * MARGIN),
    height: pos.h * ROW_HEIGHT + (pos.h - 1) * MARGIN,
  };
}
