// Reads a JSON list of expressions on stdin; prints a JSON list with, for each, null if the Lezer `parser` (one of
// Grafana's query grammars) parses it without error nodes, else the first error's position and a snippet.
export async function check(parser) {
  let input = '';
  for await (const chunk of process.stdin) input += chunk;

  const firstError = (expr) => {
    let error = null;
    parser.parse(expr).iterate({
      enter: (node) => {
        if (error === null && node.type.isError) {
          const at = node.from;
          error = `syntax error at ${at}: ${JSON.stringify(expr.slice(Math.max(0, at - 20), at))}` +
            ` ⚠ ${JSON.stringify(expr.slice(at, at + 20))}`;
        }
        return error === null;
      },
    });
    return error;
  };

  process.stdout.write(JSON.stringify(JSON.parse(input).map(firstError)) + '\n');
}
