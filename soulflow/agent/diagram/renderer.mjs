// Mermaid -> SVG / ASCII for soulflow's diagram_render tool (driven by render.py).
//
// Protocol: one JSON request on stdin
//   {"source": "...", "formats": ["svg", "ascii"], "theme": "<optional built-in theme name>"}
// and one JSON reply on stdout
//   {"ok": true, "svg": "...", "ascii": "..."}  or  {"ok": false, "error": "one sentence"}.
// The exit code is 0 for both replies: a non-zero exit means the renderer itself crashed
// (e.g. V8 ran out of heap), which render.py reports separately.
//
// Why a separate process: beautiful-mermaid is a pure-JS library, and running it in a
// short-lived child lets the daemon enforce a wall-clock timeout and a heap cap on diagrams
// the model writes, without a browser.

import { THEMES, parseMermaid, renderMermaidASCII, renderMermaidSVG } from 'beautiful-mermaid'

const FORMATS = new Set(['svg', 'ascii'])
// render.py caps input at 50 KB; this bound only protects the renderer when run by hand.
const MAX_REQUEST_CHARS = 1_000_000
// Reading stdin is the only thing that can wait on the outside world; rendering is synchronous.
const STDIN_TIMEOUT_MS = 10_000
const SUPPORTED =
  'flowchart/graph, sequenceDiagram, classDiagram, stateDiagram(-v2), erDiagram and xychart-beta'
// The library embeds Google Fonts @imports in every SVG; a self-hosted daemon should not make
// whoever views a diagram fetch from a third party, so they are removed (system fonts are used).
const REMOTE_FONT_IMPORT =
  /^[ \t]*@import url\('https:\/\/fonts\.googleapis\.com\/[^']*'\);[ \t]*\r?\n?/gm
const FLOWCHART_HEADER = /^(graph|flowchart)(?:\s+(TD|TB|LR|BT|RL))?\s*(?:;\s*(.*))?$/i
const OTHER_HEADER = /^(sequenceDiagram|classDiagram|erDiagram|stateDiagram(?:-v2)?)\s*;\s*(.*)$/i

/** Raised for problems with the request or the diagram: the message is shown to the user. */
class UserError extends Error {}

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = []
    let size = 0
    const timer = setTimeout(() => {
      reject(new UserError('No request arrived on stdin within 10 seconds.'))
    }, STDIN_TIMEOUT_MS)
    process.stdin.setEncoding('utf8')
    process.stdin.on('data', (chunk) => {
      size += chunk.length
      if (size > MAX_REQUEST_CHARS) {
        clearTimeout(timer)
        reject(new UserError('The request is larger than 1 MB.'))
        process.stdin.destroy()
        return
      }
      chunks.push(chunk)
    })
    process.stdin.on('end', () => {
      clearTimeout(timer)
      resolve(chunks.join(''))
    })
    process.stdin.on('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
  })
}

function parseRequest(text) {
  let request
  try {
    request = JSON.parse(text)
  } catch {
    throw new UserError('The request on stdin is not valid JSON.')
  }
  if (request === null || typeof request !== 'object' || Array.isArray(request)) {
    throw new UserError('The request must be a JSON object.')
  }
  const { source, formats = ['svg', 'ascii'], theme } = request
  if (typeof source !== 'string') throw new UserError('"source" must be a string.')
  if (!Array.isArray(formats) || formats.length === 0 || !formats.every((f) => FORMATS.has(f))) {
    throw new UserError('"formats" must be a non-empty list of "svg" and/or "ascii".')
  }
  // Only named themes: the library writes colour values into the SVG unescaped.
  if (theme !== undefined && theme !== null && !Object.hasOwn(THEMES, theme)) {
    const names = Object.keys(THEMES).join(', ')
    throw new UserError(`Unknown theme ${JSON.stringify(theme)}; choose one of: ${names}.`)
  }
  return { source, formats: new Set(formats), theme: theme ?? null }
}

// ---------------------------------------------------------------------------------------------
// Source normalisation. The library's parser is strict about the header and lenient (silently
// dropping) about the rest, so forms that Mermaid itself accepts and models write all the time
// would otherwise fail or render half a diagram. Error messages take their line numbers from
// the source as the user wrote it, not from this rewritten text.
// ---------------------------------------------------------------------------------------------

const isBlank = (line) => line.trim() === ''
const firstContentIndex = (lines) => lines.findIndex((line) => !isBlank(line))

/** Blank a wrapping ```mermaid ... ``` code fence. */
function blankCodeFence(lines) {
  const first = firstContentIndex(lines)
  if (first < 0 || !/^\s*(```|~~~)\s*(mermaid)?\s*$/i.test(lines[first])) return
  lines[first] = ''
  let last = lines.length - 1
  while (last > first && isBlank(lines[last])) last -= 1
  if (/^\s*(```|~~~)\s*$/.test(lines[last])) lines[last] = ''
}

/** Blank YAML front matter (`---` ... `---`); its title/config are not rendered. */
function blankFrontMatter(lines) {
  const first = firstContentIndex(lines)
  if (first < 0 || lines[first].trim() !== '---') return
  const end = lines.findIndex((line, i) => i > first && line.trim() === '---')
  if (end < 0) return
  for (let i = first; i <= end; i += 1) lines[i] = ''
}

/** Blank `%%` comments/directives above the header: the type sniffer reads the first line. */
function blankLeadingComments(lines) {
  for (let i = 0; i < lines.length; i += 1) {
    if (isBlank(lines[i])) continue
    if (!lines[i].trim().startsWith('%%')) return
    lines[i] = ''
  }
}

// `;` also ends HTML/Mermaid entities such as `&amp;` and `#59;`, which are not separators.
const endsWithEntity = (text) => /(&#?\w+|#\d+)$/.test(text)

/** Split a line on `;` statement separators outside quotes, brackets, |labels| and entities. */
function splitStatements(line) {
  const parts = []
  let depth = 0
  let quote = null
  let inPipe = false
  let start = 0
  for (let i = 0; i < line.length; i += 1) {
    const ch = line[i]
    if (quote) {
      if (ch === quote) quote = null
    } else if (ch === '"') {
      quote = ch
    } else if (ch === '|' && depth === 0) {
      inPipe = !inPipe
    } else if ('[({'.includes(ch)) {
      depth += 1
    } else if (')]}'.includes(ch)) {
      depth = Math.max(0, depth - 1)
    } else if (ch === ';' && depth === 0 && !inPipe && !endsWithEntity(line.slice(start, i))) {
      parts.push(line.slice(start, i))
      start = i + 1
    }
  }
  parts.push(line.slice(start))
  return parts.filter((part) => !isBlank(part))
}

/** Canonicalise the header line; returns whether the diagram is a flowchart. */
function normalizeHeader(lines) {
  const index = firstContentIndex(lines)
  if (index < 0) return false
  const header = lines[index].trim()
  const flow = FLOWCHART_HEADER.exec(header)
  if (flow) {
    const direction = (flow[2] ?? 'TD').toUpperCase()
    lines[index] = [`${flow[1]} ${direction}`, ...(flow[3] ? [flow[3]] : [])].join('\n')
    return true
  }
  const other = OTHER_HEADER.exec(header)
  if (other) lines[index] = [other[1], ...(other[2] ? [other[2]] : [])].join('\n')
  return false
}

function normalizeSource(source) {
  const lines = source.replace(/\r\n?/g, '\n').split('\n')
  blankCodeFence(lines)
  blankFrontMatter(lines)
  blankLeadingComments(lines)
  if (!normalizeHeader(lines)) return lines.join('\n')
  return lines.flatMap((line) => (line.includes(';') ? splitStatements(line) : [line])).join('\n')
}

/** Number (1-based) of the first line of the user's source containing `needle`, or 0. */
function lineOf(source, needle) {
  return source.split(/\r\n?|\n/).findIndex((line) => line.includes(needle)) + 1
}

// Node ids may contain `-`, so the parser reads `A-->B` as a node "A--" (and `A ---- B` as a
// node "-") and drops the link. Real Mermaid accepts the first form; either way we ask for a
// fix instead of drawing the wrong picture.
const isGarbledId = (id) => /--|-$/.test(id)

function garbledIds(text) {
  try {
    return [...parseMermaid(text).nodes.keys()].filter(isGarbledId)
  } catch {
    return []
  }
}

/** The first line of the user's source that, parsed on its own, yields a garbled node id. */
function findGarbledLine(header, source) {
  const lines = source.split(/\r\n?|\n/)
  const index = lines.findIndex(
    (line) => line.trim() !== header && garbledIds(normalizeSource(`${header}\n${line}`)).length,
  )
  return index < 0 ? null : { number: index + 1, text: lines[index].trim() }
}

function checkLinks(text, source) {
  const header = text.trim().split('\n')[0].trim()
  if (!/^(graph|flowchart|stateDiagram)/i.test(header)) return
  const ids = garbledIds(text)
  if (ids.length === 0) return
  const line = findGarbledLine(header, source)
  const fix = 'write links with spaces around them, e.g. A --> B'
  if (line) {
    const quoted = JSON.stringify(line.text)
    throw new UserError(`Line ${line.number}: could not read the link in ${quoted}; ${fix}.`)
  }
  const node = JSON.stringify(ids[0])
  throw new UserError(`Could not read a link (it was taken for a node named ${node}); ${fix}.`)
}

/** Turn a library error into one sentence that says what is accepted and where it went wrong. */
function explain(error, source) {
  const message = error instanceof Error ? error.message : String(error)
  const header = /^Invalid mermaid header: "(.*)"\./s.exec(message)
  if (header) {
    const lineNo = lineOf(source, header[1].trim())
    const where = lineNo > 0 ? ` on line ${lineNo}` : ''
    const type = JSON.stringify(header[1])
    return `Unsupported or missing diagram type ${type}${where}; supported: ${SUPPORTED}.`
  }
  if (/^Empty mermaid diagram/.test(message)) return 'The diagram source is empty.'
  return `Mermaid could not be rendered: ${message.replace(/\s+/g, ' ').trim()}`
}

function render({ source, formats, theme }) {
  const text = normalizeSource(source)
  const reply = { ok: true }
  try {
    checkLinks(text, source)
    if (formats.has('svg')) {
      const options = theme ? { ...THEMES[theme] } : {}
      reply.svg = renderMermaidSVG(text, options).replace(REMOTE_FONT_IMPORT, '')
    }
    if (formats.has('ascii')) {
      // colorMode 'auto' would guess from the (absent) terminal; chat wants plain text.
      reply.ascii = renderMermaidASCII(text, { colorMode: 'none' })
    }
  } catch (error) {
    if (error instanceof UserError) throw error
    if (error instanceof RangeError) throw error // stack overflow etc.: a crash, not bad input
    throw new UserError(explain(error, source))
  }
  return reply
}

async function main() {
  let reply
  try {
    reply = render(parseRequest(await readStdin()))
  } catch (error) {
    if (!(error instanceof UserError)) throw error
    reply = { ok: false, error: error.message }
  }
  // Exit once the reply is flushed rather than waiting for stray handles (an unclosed stdin).
  process.stdout.write(JSON.stringify(reply), () => process.exit(0))
}

main().catch((error) => {
  process.stderr.write(`renderer crashed: ${error?.stack ?? error}\n`)
  process.exit(1)
})
