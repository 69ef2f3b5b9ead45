// @grafana/ui imports monaco-editor for its code editor, which no panel draws; its CSS and fonts would have to be
// bundled for nothing. An empty module stands in for it.
export {};
