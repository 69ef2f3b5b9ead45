// A panel's transformations (merge, filter by name, organize...) through @grafana/data's transformDataFrame. Its
// registry is filled by Grafana's core at start-up; here from standardTransformers, one entry per id (a deprecated
// alias shares its id with the transformer that replaced it).
import {
  DataFrame,
  DataTransformerConfig,
  InterpolateFunction,
  standardTransformers,
  standardTransformersRegistry,
  transformDataFrame,
} from '@grafana/data';

export function registerTransformers(): void {
  const byId = new Map(Object.values(standardTransformers).map((info) => [info.id, info]));
  standardTransformersRegistry.setInit(() =>
    [...byId.values()].map((info) => ({ id: info.id, name: info.name, transformation: info }) as any)
  );
}

// The standard transformers are synchronous: the observable has delivered when subscribe returns.
export function transformed(
  configs: DataTransformerConfig[] | undefined,
  frames: DataFrame[],
  interpolate: InterpolateFunction
): DataFrame[] {
  if (!configs?.length) {
    return frames;
  }
  let result: DataFrame[] | undefined;
  transformDataFrame(configs, frames, { interpolate }).subscribe((value) => (result = value));
  if (!result) {
    throw new Error(`transformations ${configs.map((c) => c.id).join(', ')} did not complete`);
  }
  return result;
}
