// Field config as Grafana applies it: a panel's defaults and overrides become each field's config and display
// processor (unit, decimals, thresholds, colours, mappings) through @grafana/data's applyFieldOverrides. Grafana
// fills its FieldConfigOptionsRegistry from the core option editors, which are not in the libraries; ours is
// built from the property ids the panel uses, which is all applyFieldOverrides reads from it.
import {
  applyFieldOverrides,
  DataFrame,
  displayNameOverrideProcessor,
  FieldConfigOptionsRegistry,
  FieldConfigPropertyItem,
  FieldType,
  GrafanaTheme2,
  identityOverrideProcessor,
  InterpolateFunction,
  numberOverrideProcessor,
} from '@grafana/data';

const NUMERIC = new Set(['min', 'max', 'decimals']);

function property(id: string): FieldConfigPropertyItem {
  const isCustom = id.startsWith('custom.');
  return {
    id,
    name: id,
    path: isCustom ? id.slice('custom.'.length) : id,
    isCustom,
    process: NUMERIC.has(id)
      ? numberOverrideProcessor
      : id === 'displayName'
        ? displayNameOverrideProcessor
        : identityOverrideProcessor,
    shouldApply: (field) => !NUMERIC.has(id) || field.type === FieldType.number,
    override: () => null,
    editor: () => null,
  } as unknown as FieldConfigPropertyItem;
}

function registryFor(fieldConfig: any): FieldConfigOptionsRegistry {
  const { custom = {}, ...standard } = fieldConfig.defaults;
  const ids = new Set([
    ...Object.keys(standard),
    ...Object.keys(custom).map((key) => `custom.${key}`),
    ...fieldConfig.overrides.flatMap((rule: any) => rule.properties.map((p: any) => p.id)),
  ]);
  return new FieldConfigOptionsRegistry(() => [...ids].map(property));
}

// The JSON holds the base threshold step as a number (0; Grafana writes null): Grafana takes it as -Infinity.
function baseStepOpen(thresholds: any): any {
  return thresholds?.steps?.length
    ? { ...thresholds, steps: [{ ...thresholds.steps[0], value: -Infinity }, ...thresholds.steps.slice(1)] }
    : thresholds;
}

export function loaded(fieldConfig: any): any {
  return {
    defaults: { ...fieldConfig.defaults, thresholds: baseStepOpen(fieldConfig.defaults.thresholds) },
    overrides: fieldConfig.overrides.map((rule: any) => ({
      ...rule,
      properties: rule.properties.map((p: any) => (p.id === 'thresholds' ? { ...p, value: baseStepOpen(p.value) } : p)),
    })),
  };
}

export function withFieldConfig(
  frames: DataFrame[],
  fieldConfig: any,
  theme: GrafanaTheme2,
  replaceVariables: InterpolateFunction
): DataFrame[] {
  return applyFieldOverrides({
    data: frames,
    fieldConfig,
    fieldConfigRegistry: registryFor(fieldConfig),
    replaceVariables,
    theme,
    timeZone: 'utc',
  });
}
