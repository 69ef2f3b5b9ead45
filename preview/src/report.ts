// What the page shows, read from its DOM once drawn: per panel its state and text, the page's height for the
// screenshot, and every uncaught error or console error (React reports render failures there).
const SETTLE_MS = 300; // icons arrive by fetch after the first paint

const errors: string[] = [];

export function watchErrors(): void {
  window.addEventListener('error', (event) => errors.push(`uncaught: ${event.message}`));
  window.addEventListener('unhandledrejection', (event) => errors.push(`unhandled rejection: ${event.reason}`));
  const consoleError = console.error;
  console.error = (...args: unknown[]) => {
    errors.push(`console.error: ${args.map(String).join(' ')}`.slice(0, 500));
    consoleError(...args);
  };
}

function state(panel: Element): { state: string; message?: string } {
  for (const kind of ['error', 'placeholder', 'nodata']) {
    const found = panel.querySelector(`[data-preview-${kind}]`);
    if (found) {
      return { state: kind, message: found.textContent ?? '' };
    }
  }
  return { state: 'drawn' };
}

export async function report() {
  await document.fonts.ready;
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  const panels = [...document.querySelectorAll<HTMLElement>('[data-preview-panel]')].map((panel) => ({
    id: Number(panel.dataset.previewPanel),
    title: panel.dataset.title,
    type: panel.dataset.type,
    ...state(panel),
    text: panel.innerText.slice(0, 400),
  }));
  const bottom = Math.max(
    ...[...document.querySelectorAll('[data-preview-panel], [data-preview-row]')].map(
      (element) => element.getBoundingClientRect().bottom + window.scrollY
    )
  );
  return { panels, height: Math.ceil(bottom) + 16, errors };
}
