"""The entrances: adapters from a platform's event or request to the kernel's front door.
`triggers` (`trigger_once`, every CloudEvent trigger), `gate` (what every entrance checks at
import), `suffixes` (which function owns each suffix), `answer_table` and `answers` (how a
delivery's end is answered to the platform). The entrances users
import by name keep their public paths at the package's top: `dedup.tasks` (`task_once`, Cloud
Tasks and Scheduler), `dedup.http`, `dedup.outbox` and `dedup.send`.
"""
