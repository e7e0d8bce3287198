"""The platform's formats and the shims over other libraries: Firestore document ids, strict
JSON, trace context, Cloud Run service names, the Firebase app, and the two modules that name
each private attribute of google-cloud-firestore and firebase-functions the library reads.
"""
