"""The embedded default input: a small, deterministic, multilingual sample written from scratch.

When no ``--data`` folder is given (no ../shared, no network) the demo still runs every stage on
data this module writes, in the same layout as ``../shared/data``:

- ``tatoeba/{train,dev}.XXX-eng.{XXX,eng}`` for deu, fra, spa: aligned sentence pairs (line i of
  one side translates line i of the other);
- ``commoncrawl/synthetic.warc.wet.gz`` (WET conversion records) and
  ``commoncrawl/synthetic.warc.gz`` (WARC request + HTML response records): pages mixing
  navigation/cookie/legal boilerplate with content sentences;
- ``wikipedia/synwiki-LANG-pages-articles.xml.bz2``: export-schema XML dumps whose wikitext uses
  templates, infoboxes, links, references, tables, files, headings, categories, a redirect and a
  talk page.

The sentences are real English, German, French and Spanish (so fastText's lid.176 recognises
them): a small lexicon of aligned subject phrases, verb phrases and time expressions, combined by
one template ("SUBJECT VERB-PHRASE TIME."). Every combination is a translation across the four
languages, so the pairs are exact. Nothing is random except a seeded shuffle.

    python -m pipelines.synthetic --output DIR [--seed 0] [--train 600] [--dev 150] [--overwrite]
"""

from __future__ import annotations

import bz2
import io
import json
import logging
import random
from pathlib import Path
from xml.sax.saxutils import escape

from labse_common.cli import (
    add_log_level_option,
    add_overwrite_option,
    command_parser,
    doc_details,
    exit_with,
    run_main,
)
from labse_common.errors import UsageError
from labse_common.langs import TATOEBA_TO_LID
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output

log = logging.getLogger(__name__)

LANGS = ("eng", "deu", "fra", "spa")  # Tatoeba's ISO 639-3 codes, as ../shared/data uses
WIKI_CODE = {lang: TATOEBA_TO_LID[lang] for lang in LANGS}

# One row per meaning: (English, German, French, Spanish). Subjects are 3rd person singular so
# every verb phrase agrees with every subject.
SUBJECTS = [
    ("The old man", "Der alte Mann", "Le vieil homme", "El hombre viejo"),
    ("My sister", "Meine Schwester", "Ma sœur", "Mi hermana"),
    ("The young teacher", "Der junge Lehrer", "Le jeune professeur", "El joven profesor"),
    ("Our neighbour", "Unser Nachbar", "Notre voisin", "Nuestro vecino"),
    ("The little girl", "Das kleine Mädchen", "La petite fille", "La niña pequeña"),
    ("His brother", "Sein Bruder", "Son frère", "Su hermano"),
    ("The doctor", "Der Arzt", "Le médecin", "El médico"),
    ("Every student", "Jeder Student", "Chaque étudiant", "Cada estudiante"),
    ("The baker", "Der Bäcker", "Le boulanger", "El panadero"),
    ("My grandmother", "Meine Großmutter", "Ma grand-mère", "Mi abuela"),
    ("The tired driver", "Der müde Fahrer", "Le chauffeur fatigué", "El conductor cansado"),
    ("Her best friend", "Ihre beste Freundin", "Sa meilleure amie", "Su mejor amiga"),
]
VERB_PHRASES = [
    ("reads a book", "liest ein Buch", "lit un livre", "lee un libro"),
    (
        "drinks a cup of coffee",
        "trinkt eine Tasse Kaffee",
        "boit une tasse de café",
        "bebe una taza de café",
    ),
    ("walks to the station", "geht zum Bahnhof", "marche jusqu'à la gare", "camina a la estación"),
    (
        "writes a long letter",
        "schreibt einen langen Brief",
        "écrit une longue lettre",
        "escribe una carta larga",
    ),
    (
        "cooks soup for the whole family",
        "kocht Suppe für die ganze Familie",
        "prépare une soupe pour toute la famille",
        "cocina sopa para toda la familia",
    ),
    (
        "opens the kitchen window",
        "öffnet das Küchenfenster",
        "ouvre la fenêtre de la cuisine",
        "abre la ventana de la cocina",
    ),
    (
        "buys fresh bread at the market",
        "kauft frisches Brot auf dem Markt",
        "achète du pain frais au marché",
        "compra pan fresco en el mercado",
    ),
    ("listens to the radio", "hört Radio", "écoute la radio", "escucha la radio"),
    (
        "cleans the small kitchen",
        "putzt die kleine Küche",
        "nettoie la petite cuisine",
        "limpia la cocina pequeña",
    ),
    ("plays the piano", "spielt Klavier", "joue du piano", "toca el piano"),
    (
        "waters the flowers in the garden",
        "gießt die Blumen im Garten",
        "arrose les fleurs du jardin",
        "riega las flores del jardín",
    ),
    (
        "takes the bus to work",
        "nimmt den Bus zur Arbeit",
        "prend le bus pour aller au travail",
        "toma el autobús para ir al trabajo",
    ),
    (
        "feeds the hungry cat",
        "füttert die hungrige Katze",
        "nourrit le chat affamé",
        "da de comer al gato hambriento",
    ),
    (
        "learns new words",
        "lernt neue Wörter",
        "apprend de nouveaux mots",
        "aprende palabras nuevas",
    ),
]
TIMES = [
    ("every morning", "jeden Morgen", "chaque matin", "cada mañana"),
    ("in the evening", "am Abend", "le soir", "por la noche"),
    ("on Sundays", "sonntags", "le dimanche", "los domingos"),
    ("after lunch", "nach dem Mittagessen", "après le déjeuner", "después del almuerzo"),
    ("before breakfast", "vor dem Frühstück", "avant le petit déjeuner", "antes del desayuno"),
    ("in winter", "im Winter", "en hiver", "en invierno"),
    ("every day", "jeden Tag", "tous les jours", "todos los días"),
    ("at the weekend", "am Wochenende", "le week-end", "el fin de semana"),
]

# Page furniture for the web sample, per language: what the quality rules are meant to drop.
BOILERPLATE = {
    "eng": [
        "Home | News | Sport | Contact",
        "Skip to main content",
        "Share on Facebook",
        "Accept all cookies",
        "© 2024 Example Media. All rights reserved.",
        "Log in",
        "Privacy policy | Terms of use",
        "12 March 2024",
    ],
    "deu": [
        "Startseite | Nachrichten | Sport | Kontakt",
        "Zum Inhalt springen",
        "Auf Facebook teilen",
        "Alle Cookies akzeptieren",
        "© 2024 Beispiel Verlag. Alle Rechte vorbehalten.",
        "Anmelden",
        "Datenschutz | Impressum",
        "12. März 2024",
    ],
    "fra": [
        "Accueil | Actualités | Sport | Contact",
        "Aller au contenu",
        "Partager sur Facebook",
        "Accepter tous les cookies",
        "© 2024 Exemple Médias. Tous droits réservés.",
        "Connexion",
        "Politique de confidentialité | Mentions légales",
        "12 mars 2024",
    ],
    "spa": [
        "Inicio | Noticias | Deportes | Contacto",
        "Ir al contenido",
        "Compartir en Facebook",
        "Aceptar todas las cookies",
        "© 2024 Ejemplo Medios. Todos los derechos reservados.",
        "Iniciar sesión",
        "Política de privacidad | Aviso legal",
        "12 de marzo de 2024",
    ],
}


def all_sentences() -> list[dict[str, str]]:
    """Every combination as {lang: sentence}, in a fixed order."""
    out = []
    for s in SUBJECTS:
        for v in VERB_PHRASES:
            for t in TIMES:
                out.append({lang: f"{s[i]} {v[i]} {t[i]}." for i, lang in enumerate(LANGS)})
    return out


def split_sentences(
    seed: int, n_train: int, n_dev: int
) -> dict[str, dict[str, list[dict[str, str]]]]:
    """From one seeded shuffle of the combinations: disjoint train and dev pairs for every
    non-English language (no English sentence serves two languages) and the rest as web text."""
    rows = all_sentences()
    random.Random(seed).shuffle(rows)
    others = LANGS[1:]
    need = len(others) * (n_train + n_dev)
    if need >= len(rows):
        raise ValueError(f"{len(others)} x (train + dev) must stay below {len(rows)} combinations")
    train = {lang: rows[i * n_train : (i + 1) * n_train] for i, lang in enumerate(others)}
    base = len(others) * n_train
    dev = {lang: rows[base + i * n_dev : base + (i + 1) * n_dev] for i, lang in enumerate(others)}
    return {"train": train, "dev": dev, "web": {"all": rows[need:]}}


def write_tatoeba(out: Path, splits: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        for lang in LANGS[1:]:
            for side in (lang, "eng"):
                lines = [row[side] for row in splits[split][lang]]
                (out / f"{split}.{lang}-eng.{side}").write_text(
                    "\n".join(lines) + "\n", encoding="utf-8"
                )


def own_rows(web: list[dict[str, str]], lang: str) -> list[dict[str, str]]:
    """Each language's web text is its own share of the combinations, so the web pages of two
    languages are not translations of each other (only the Tatoeba-style dev pairs are)."""
    return web[LANGS.index(lang) :: len(LANGS)]


def _pages(rows: list[dict[str, str]], lang: str, per_page: int) -> list[list[str]]:
    texts = [r[lang] for r in rows]
    return [texts[i : i + per_page] for i in range(0, len(texts), per_page)]


def write_web(out: Path, web: list[dict[str, str]], seed: int) -> None:
    """One WET file (text records) and one WARC file (HTML responses + requests)."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    out.mkdir(parents=True, exist_ok=True)
    wet_buf, warc_buf = io.BytesIO(), io.BytesIO()
    wet, warc = WARCWriter(wet_buf, gzip=True), WARCWriter(warc_buf, gzip=True)
    for lang in LANGS:
        bp = BOILERPLATE[lang]
        rows = own_rows(web, lang)
        rows = rows[
            : len(rows) // 2
        ]  # the first half of this language's share; Wikipedia: the rest
        half = len(rows) // 2
        for n, page in enumerate(_pages(rows[:half], lang, 6)):
            lines = [bp[0], bp[1], *page[:3], bp[2], *page[3:], bp[3], bp[4], bp[7]]
            url = f"https://{WIKI_CODE[lang]}.example.org/wet/{n}"
            rec = wet.create_warc_record(
                url,
                "conversion",
                payload=io.BytesIO("\n".join(lines).encode()),
                warc_content_type="text/plain",
                warc_headers_dict=fixed_headers(url, "conversion"),
            )
            wet.write_record(rec)
        for n, page in enumerate(_pages(rows[half:], lang, 6)):
            paras = "".join(
                f"<p>{escape(' '.join(page[i : i + 2]))}</p>" for i in range(0, len(page), 2)
            )
            html = (
                f'<!DOCTYPE html><html lang="{WIKI_CODE[lang]}"><head><meta charset="utf-8">'
                f'<title>{escape(page[0][:40])}</title></head><body><nav><a href="/">{escape(bp[0])}'
                f'</a></nav><div class="cookie">{escape(bp[3])}</div><main><article><h1>'
                f"{escape(page[0][:40])}</h1>{paras}</article></main><footer>{escape(bp[4])} "
                f"{escape(bp[6])}</footer></body></html>"
            )
            url = f"https://{WIKI_CODE[lang]}.example.org/html/{n}"
            http = StatusAndHeaders(
                "200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1"
            )
            req = f"GET /html/{n} HTTP/1.1\r\nHost: {WIKI_CODE[lang]}.example.org\r\n\r\n".encode()
            warc.write_record(
                warc.create_warc_record(
                    url,
                    "request",
                    payload=io.BytesIO(req),
                    warc_headers_dict=fixed_headers(url, "request"),
                )
            )
            warc.write_record(
                warc.create_warc_record(
                    url,
                    "response",
                    payload=io.BytesIO(html.encode()),
                    http_headers=http,
                    warc_headers_dict=fixed_headers(url, "response"),
                )
            )
    (out / "synthetic.warc.wet.gz").write_bytes(wet_buf.getvalue())
    (out / "synthetic.warc.gz").write_bytes(warc_buf.getvalue())


def fixed_headers(url: str, kind: str) -> dict[str, str]:
    """WARC headers warcio would fill with the clock and a random id: fixed, so the sample (and
    everything computed from it) is byte-for-byte reproducible."""
    import uuid

    rid = uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}:{url}")
    return {"WARC-Date": "2024-03-12T00:00:00Z", "WARC-Record-ID": f"<urn:uuid:{rid}>"}


def _wikitext(title: str, sents: list[str], lang: str, n: int) -> str:
    """Article wikitext with the constructs a real dump has; only the prose should survive."""
    s = sents + [""] * 6
    return (
        f"{{{{Short description|{title}}}}}\n{{{{Infobox person\n| name = {title}\n| birth_date = "
        f"{{{{birth date|1950|1|{n % 28 + 1}}}}}\n| occupation = [[Example]]\n}}}}\n"
        f"'''{title}''' — {s[0]}<ref>{{{{cite web|url=https://example.org/{n}|title=Source}}}}</ref> "
        f'[[Example|{s[1]}]]\n\n== {title} ==\n{s[2]} {s[3]}<ref name="a{n}" />\n\n'
        f"[[File:Example{n}.jpg|thumb|right|Caption of a picture]]\n"
        f'{{| class="wikitable"\n|-\n! Column !! Value\n|-\n| a || {n}\n|}}\n\n'
        f"=== Notes ===\n* {s[4]}\n* {s[5]}\n\n{{{{Reflist}}}}\n\n"
        f"[[Category:Synthetic {WIKI_CODE[lang]} pages]]\n[[de:Beispiel {n}]]\n"
    )


def _page_xml(title: str, ns: int, pid: int, text: str, redirect: str | None = None) -> str:
    red = f'    <redirect title="{escape(redirect)}" />\n' if redirect else ""
    return (
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>{pid}</id>\n{red}"
        f"    <revision>\n      <id>{pid * 10}</id>\n      <model>wikitext</model>\n"
        f'      <format>text/x-wiki</format>\n      <text xml:space="preserve">{escape(text)}</text>\n'
        f"    </revision>\n  </page>\n"
    )


def write_wikipedia(out: Path, web: list[dict[str, str]], seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for lang in LANGS:
        code = WIKI_CODE[lang]
        rows = own_rows(web, lang)
        rows = rows[len(rows) // 2 :]  # the other half: no sentence in both sources
        head = (
            f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" '
            f'xml:lang="{code}">\n  <siteinfo>\n    <sitename>Synthetic Wikipedia</sitename>\n'
            f"    <dbname>{code}wiki</dbname>\n  </siteinfo>\n"
        )
        pages = []
        for n, chunk in enumerate(_pages(rows, lang, 6)):
            title = f"{code.upper()} Article {n}"
            pages.append(
                _page_xml(
                    title, 0, 1000 * (LANGS.index(lang) + 1) + n, _wikitext(title, chunk, lang, n)
                )
            )
        pages.append(
            _page_xml(
                f"{code.upper()} Redirect",
                0,
                999_001,
                "#REDIRECT [[Article 0]]",
                redirect=f"{code.upper()} Article 0",
            )
        )
        pages.append(_page_xml(f"Talk:{code.upper()} Article 0", 1, 999_002, "A talk page. ~~~~"))
        xml = head + "".join(pages) + "</mediawiki>\n"
        (out / f"synwiki-{code}-pages-articles.xml.bz2").write_bytes(
            bz2.compress(xml.encode("utf-8"))
        )


def data_files() -> dict[str, list[str]]:
    """The corpus files :func:`generate` writes, relative to its output folder."""
    return {
        "commoncrawl": ["commoncrawl/synthetic.warc.gz", "commoncrawl/synthetic.warc.wet.gz"],
        "wikipedia": [
            f"wikipedia/synwiki-{WIKI_CODE[lang]}-pages-articles.xml.bz2" for lang in LANGS
        ],
    }


def generate(out: str | Path, seed: int = 0, n_train: int = 300, n_dev: int = 100) -> dict:
    """Write the whole sample under ``out`` (the ../shared/data layout); returns its summary."""
    out = Path(out)
    splits = split_sentences(seed, n_train, n_dev)
    write_tatoeba(out / "tatoeba", splits)
    write_web(out / "commoncrawl", splits["web"]["all"], seed)
    write_wikipedia(out / "wikipedia", splits["web"]["all"], seed)
    summary = {
        "synthetic": True,
        "seed": seed,
        "languages": list(LANGS),
        "pairs_train_per_language": n_train,
        "pairs_dev_per_language": n_dev,
        "web_sentences_per_language": len(splits["web"]["all"]) // len(LANGS),
    }
    (out / "SYNTHETIC.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = command_parser(
        "python -m pipelines.synthetic",
        "Write the small built-in multilingual sample (aligned pairs, CommonCrawl WET and WARC files, Wikipedia dumps) in the layout of ../shared/data.",
        doc_details(__doc__),
        examples=[
            "python -m pipelines.synthetic --output data/",
            "python -m pipelines.synthetic --output data/ --train 600 --dev 150 --overwrite",
        ],
    )
    ap.add_argument("--output", required=True, help="folder to write (the ../shared/data layout)")
    ap.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    ap.add_argument("--train", type=int, default=300, help="training pairs per language (300)")
    ap.add_argument("--dev", type=int, default=100, help="dev pairs per language (100)")
    add_overwrite_option(ap)
    add_log_level_option(ap)
    args = ap.parse_args(argv)
    setup_logging(args.log_level)

    def body() -> int:
        combos, need = len(all_sentences()), (len(LANGS) - 1) * (args.train + args.dev)
        if args.train < 0 or args.dev < 0 or need >= combos:
            raise UsageError(
                f"--train {args.train} --dev {args.dev}: each at least 0 and "
                f"{len(LANGS) - 1} x (train + dev) below {combos}"
            )
        # Claimed, written aside and committed at the end, like every stage's output.
        with claim_output(args.output, args.overwrite) as out:
            summary = generate(out.tmp, args.seed, args.train, args.dev)
        log.info("synthetic sample in %s: %s", args.output, json.dumps(summary))
        return 0

    return run_main(body, log, args=args)


if __name__ == "__main__":
    exit_with(main)
