"""Query templates and slot vocabularies of the synthetic text routing benchmark."""

from __future__ import annotations

TEMPLATES: dict[str, tuple[tuple[str, ...], ...]] = {
    "arithmetic": (
        ("What is {a} + {b}?", "Compute {b} x {n}.", "What is {a} minus {b}?"),
        (
            "{name} buys {n} {item} at ${p} each and pays with a ${bill} note. "
            "How much change does {name} get?",
            "A train travels {a} km in {n} hours. What is its average speed in km/h?",
            "{name} has {a} {item} and gives away {pct}% of them. How many are left?",
        ),
        (
            "A tank fills through one pipe in {n} hours and drains through another in {m} "
            "hours. Starting empty with both pipes open, how long until it is full? Reason "
            "step by step and give the exact fraction.",
            "{name} invests ${a}00 at {pct}% compound interest per year and withdraws ${b} "
            "at the end of each year. How much is left after {n} years? Show every step.",
            "Find all integer solutions of {n}x + {m}y = {a} with x and y between -{b} and "
            "{b}, and explain your method.",
        ),
    ),
    "coding": (
        (
            "Write a Python function `{fn}` that returns the {agg} of a list of numbers.",
            "In Python, how do I {task}?",
        ),
        (
            "Write a Python function that reads a {fmt} file and returns a dictionary mapping "
            "each {key} to its {value}. Raise ValueError on malformed rows.",
            "Fix the bug in this Python code so that it {goal}:\n\ndef {fn}(items):\n"
            "    for i in range(len(items)):\n        if items[i] > items[i + 1]:\n"
            "            return False\n    return True",
        ),
        (
            "Implement a thread-safe LRU cache in Python with O(1) get and put, a per-entry "
            "TTL and {feature}. Include type hints and pytest unit tests.",
            "Design a Python {struct} supporting {ops} in O(log n) time; prove the complexity "
            "and write tests for the edge cases.",
            "Write an asyncio web crawler in Python that respects robots.txt, allows at most "
            "{n} concurrent requests, deduplicates URLs and offers {feature}.",
        ),
    ),
    "trivia": (
        (
            "What is the capital of {country}?",
            "What is the official currency of {country}?",
            "Who wrote '{book}'?",
            "How many {count_q}?",
        ),
        (
            "In which century was {person} born, and what is {person} best known for?",
            "Which river flows through {city}, and into which sea does it drain?",
        ),
        (
            "Who was the {ordinal} person to serve as {office}, and when did the term end?",
            "Which chemical element has atomic number {z}, and who first isolated it?",
            "What was the population of {city} in the {year} census, to the nearest 100,000?",
        ),
    ),
    "legal": (
        ("In plain English, what is {term}?", "What is the difference between {pair}?"),
        (
            "Under {contract}, can the {role} terminate early if {condition}? "
            "Answer briefly and note any exceptions.",
            "Is a verbal agreement to {deal} enforceable? Explain the main rule.",
        ),
        (
            "In {jurisdiction}, {party} signed {contract} with a {clause} clause. After "
            "{event}, the other side claims {claim}. Analyse whether the clause is enforceable, "
            "citing the relevant doctrine and the likely counter-arguments.",
            "Set out the arguments for both sides where {event} led to a breach of {contract} "
            "in {jurisdiction}, considering {doctrine} and the remedies available.",
        ),
    ),
    "translation": (
        ('Translate into {lang}: "{phrase}"',),
        ('Translate into {lang}, keeping a formal register: "{sentence} {sentence2}"',),
        (
            "Translate this passage into {lang}, rendering the meaning of each idiom rather "
            'than its words, and explain your choices: "{idiom} {sentence}"',
            "Translate this notice into {lang}, then back into English, and point out any "
            'loss of meaning: "{sentence} {sentence2} {idiom}"',
        ),
    ),
    "summarization": (
        ("Summarise in one sentence: {news}",),
        ("Summarise for a {audience} in three bullet points: {news} {detail} {detail2}",),
        (
            "Write an abstract of at most 80 words for this report, keeping every figure and "
            "naming its main limitation: {news} {detail} {detail2} {detail3}",
        ),
    ),
    "creative": (
        (
            "Write a haiku about {topic}.",
            "Write a two-line rhyming greeting card message about {topic}.",
            "Suggest a catchy name for a {business} in {city}.",
        ),
        (
            "Write a short story of about 200 words about a {character} who {plot}.",
            "Write a limerick about {topic} for a {audience}.",
        ),
        (
            "Write a Shakespearean sonnet about {topic} that ends with a twist and uses the "
            "word '{word}' in every quatrain.",
            "Write the opening scene of a mystery set in {place}, narrated by an unreliable "
            "{character}, with the key clue hidden in the dialogue.",
        ),
    ),
}

# slot vocabularies, alternatives separated by " | "
VOCAB: dict[str, str] = {
    "name": "Ana | Ravi | Mei | Tom | Fatima | Lukas | Amara | Diego | Yuki | Omar",
    "item": "apples | notebooks | tickets | pencils | mangoes | bus passes | candles",
    "fn": "summarize | total | find_max | moving_average | normalize | is_sorted",
    "agg": "sum | average | median | maximum | product | standard deviation",
    "task": (
        "reverse a string | read a file line by line | sort a dict by value | "
        "remove duplicates from a list | merge two dictionaries | parse a date string"
    ),
    "fmt": "CSV | JSON Lines | YAML | TOML | server log",
    "key": "user id | product name | date | city | order number",
    "value": "total spend | latest status | number of visits | average rating",
    "goal": "checks that a list is sorted | also works on empty lists | never raises IndexError",
    "feature": "hit-rate metrics | a memory budget | graceful shutdown | pluggable policies",
    "struct": "interval tree | order-statistics tree | skip list | persistent segment tree",
    "ops": "insert, delete and rank queries | range updates and range sums | k-th smallest",
    "country": (
        "France | Kenya | Peru | Vietnam | Norway | Canada | Egypt | Mongolia | Bhutan | "
        "Uruguay | Latvia | Malawi | Laos | Iceland | Oman | Fiji | Slovenia | Bolivia"
    ),
    "book": (
        "Pride and Prejudice | Things Fall Apart | The Trial | Moby-Dick | Beloved | "
        "Middlemarch | The Master and Margarita | Pedro Paramo | Dream of the Red Chamber"
    ),
    "count_q": (
        "days are in a leap year | sides does a hexagon have | bones has an adult human | "
        "moons does Mars have | strings does a standard violin have | keys does a piano have"
    ),
    "person": "Ada Lovelace | Ibn Battuta | Marie Curie | Leonhard Euler | Hokusai",
    "city": "Vienna | Baghdad | Budapest | Cairo | Kinshasa | Lyon | Seville | Krakow",
    "ordinal": "third | fifth | seventh | ninth | twelfth",
    "office": (
        "Secretary-General of the United Nations | President of the European Commission | "
        "Prime Minister of New Zealand | Chief Justice of India"
    ),
    "year": "1900 | 1930 | 1950 | 1970 | 1990",
    "term": (
        "consideration | an easement | a tort | adverse possession | habeas corpus | "
        "a lien | an injunction | strict liability | a fiduciary duty | joint tenancy"
    ),
    "pair": (
        "a lease and a licence | a warranty and a guarantee | a patent and a copyright | "
        "a misdemeanour and a felony | mediation and arbitration | a will and a trust"
    ),
    "contract": "a residential lease | an employment contract | a software licence | an NDA",
    "party": "a tenant | a landlord | an employee | a supplier | a licensee",
    "role": "tenant | landlord | employee | supplier | licensee",
    "condition": (
        "the flat becomes uninhabitable | they relocate for work | "
        "the other side pays late twice | a key person leaves the company"
    ),
    "deal": "sell a used car | lend money to a friend | sell land | rent a room",
    "jurisdiction": "England and Wales | California | Ontario | New South Wales | Germany",
    "clause": "non-compete | liquidated damages | limitation of liability | force majeure",
    "event": "a supply-chain failure | a data breach | a pandemic lockdown | a merger",
    "claim": (
        "the clause is a penalty | the clause is a restraint of trade | "
        "the event was foreseeable | notice was not properly given"
    ),
    "doctrine": "frustration | promissory estoppel | unconscionability | implied terms",
    "lang": "French | German | Spanish | Japanese | Swahili | Portuguese | Korean | Hindi | Thai",
    "phrase": (
        "Good morning, how are you? | Where is the train station? | The bill, please. | "
        "I would like a coffee with milk. | Thank you for your help. | "
        "Could you repeat that more slowly? | My flight was cancelled. | "
        "How much does this cost? | We are meeting at noon tomorrow."
    ),
    "sentence": (
        "We regret to inform you that the meeting has been postponed. | "
        "Please find attached the revised schedule for the next quarter. | "
        "The committee will review all applications by the end of the month."
    ),
    "sentence2": (
        "Any questions should be sent to the secretariat in writing. | "
        "Late submissions will not be considered under any circumstances. | "
        "We thank you for your patience and continued support."
    ),
    "idiom": (
        "It's raining cats and dogs, so let's not beat around the bush. | "
        "He spilled the beans before we had our ducks in a row. | "
        "Break a leg tonight, and don't count your chickens before they hatch."
    ),
    "news": (
        "The city council approved a {pct}% rise in the transport budget, citing ridership. | "
        "A study of {a} patients found that daily walks lowered blood pressure in older adults. | "
        "The company reported revenue of ${a} million, up {pct}% on last year. | "
        "Heavy rain flooded parts of {city}, forcing {b}0 families from their homes."
    ),
    "detail": (
        "Officials said the changes would take effect next spring. | "
        "Critics argued that the sample was too small for firm conclusions."
    ),
    "detail2": (
        "Analysts expect growth to slow in the second half of the year. | "
        "Emergency services warned that more rain is forecast."
    ),
    "detail3": (
        "The authors note that participants were not randomly assigned. | "
        "A full report is due to be published in {year}."
    ),
    "audience": "busy executive | high-school student | policy maker | general reader",
    "topic": (
        "autumn rain | a lighthouse | city traffic | first snow | an old library | "
        "a night train | a forgotten garden | the last day of summer | a broken clock"
    ),
    "business": "bakery | bike repair shop | plant nursery | coffee truck",
    "character": "retired astronaut | shy dragon | night-shift nurse | street violinist",
    "plot": (
        "finds a letter addressed to the future | loses their shadow | "
        "must teach a robot to laugh | inherits a map with a missing corner"
    ),
    "word": "ember | harbour | silence | glass",
    "place": "a snowed-in mountain hotel | a Venetian glass workshop | an Antarctic station",
}
