import sys

from voicelab.cli import main

sys.exit(main())
