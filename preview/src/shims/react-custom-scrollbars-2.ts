// @grafana/ui's .mjs files import this CommonJS package by its default export. esbuild follows Node there, where
// the default export of CommonJS is the whole module.exports, not the component the package marks as default;
// the Table then renders an object. This module hands them the component.
export { Scrollbars as default } from '../../node_modules/react-custom-scrollbars-2/lib/index.js';
